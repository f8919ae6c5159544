"""`freeze_layers`: the embeddings and the first k transformer layers come out of training unchanged, the
layers above do not; a k the model cannot take is one error naming the option, from the API and the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.errors import ConfigError
from training.data.demo_data import build_demo_dataset
from training.train.freeze import freeze_lower_layers
from training.train.run_hooks import RunHooks
from training.train.trainer import train


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    return build_demo_dataset(tmp_path_factory.mktemp("freeze") / "pydocs", n_docs=30, n_test=6)


def _weights(encoder: Encoder) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in encoder.model.named_parameters()}


def test_frozen_layers_are_unchanged_and_the_layers_above_are_trained(tmp_path, tiny):
    config = TrainConfig(
        freeze_layers=2, max_steps=3, batch_size=4, max_seq_length=32, hard_negatives=0, lr=1e-3,
        report=False, eval_max_queries=4, seed=3,
    )  # fmt: skip
    before = _weights(Encoder.load())
    result = train(config, tiny, tmp_path / "run", hooks=RunHooks(show_progress=False))
    after = _weights(Encoder.load(result.model_dir))
    frozen = [n for n in before if ".embeddings." in n or any(f".layer.{i}." in n for i in (0, 1))]
    trained = [n for n in before if any(f".layer.{i}." in n for i in range(2, 6))]
    assert frozen and trained
    assert all(torch.equal(before[n], after[n]) for n in frozen)
    changed = [n for n in trained if not torch.equal(before[n], after[n])]
    assert len(changed) > len(trained) // 2, changed  # AdamW moved (nearly) every weight above layer 2
    assert result.config_path.read_text().count('"freeze_layers": 2') == 1  # travels in config.json


def test_no_gradient_reaches_a_frozen_layer():
    model = Encoder.load().model
    frozen = freeze_lower_layers(model, 3)
    assert frozen and not any(p.requires_grad for p in frozen)
    model.train()
    out = model(model.tokenize(["a query about bone density"]))["sentence_embedding"]
    out.sum().backward()
    assert all(p.grad is None for p in frozen)  # no backward through them
    layer3 = model[0].auto_model.encoder.layer[3]
    assert all(p.grad is not None for p in layer3.parameters())


def test_a_k_past_the_models_depth_is_refused_naming_the_option(tmp_path, tiny):
    with pytest.raises(ConfigError, match=r"freeze_layers=6: the model has 6 transformer layers"):
        freeze_lower_layers(Encoder.load().model, 6)
    cmd = [sys.executable, "-m", "training", "train", "--data", str(tiny), "--out", str(tmp_path / "o"),
           "--freeze-layers", "6", "--quiet"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "freeze_layers=6" in done.stderr and "Traceback" not in done.stderr
    past_bound = subprocess.run(
        [*cmd[:-3], "--freeze-layers", "49", "--quiet"], capture_output=True, text=True, timeout=300
    )
    assert past_bound.returncode == 2 and "--freeze-layers" in past_bound.stderr
    assert "48" in past_bound.stderr and "Traceback" not in past_bound.stderr
