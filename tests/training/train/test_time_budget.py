"""A time budget on a real tiny retrain (issue 40 item 3): it stops training early and says so, the published
model is the best checkpoint measured, a budget too small for the encode fails before training, and the
duration option parses what a user types."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan, retrain_plan
from contract.query_config import QueryRetrainConfig
from training.cli.config_options import parse_duration
from training.data.beir_slice import beir_slice
from training.data.split import load_split
from training.data.validation_carve import carve_validation
from training.train import budget
from training.train.budget import BudgetTooSmall
from training.train.checkpoints import BestCheckpoint, pool_ndcg, validation_pool
from training.train.run_hooks import RunHooks
from training.train.trainer import train

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads stall whenever another job holds a core of a shared 2-core box
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def world(demo_dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    data = beir_slice(demo_dataset, root / "data", n_train=30, n_test=10, n_distractors=40)
    base = Encoder.load()
    base.model.max_seq_length = 32  # every encode stays cheap
    base.save(root / "base")
    return {"root": root, "data": data, "base": str(root / "base")}


def _config(base: str, **kw) -> TrainConfig:
    # 1,000 epochs of 4-pair batches: far more steps than any budget below holds
    recipe = {"base_model": base, "batch_size": 4, "max_seq_length": 32, "hard_negatives": 0, "epochs": 1000}
    return TrainConfig(**(recipe | {"report": False, "eval_max_queries": 10, "seed": 0} | kw))


def test_a_budget_stops_training_early_and_the_record_says_so(world, tmp_path, monkeypatch):
    # Given: no publication to reserve for beyond the encode (a `train` run), and a 25 s budget
    monkeypatch.setattr(budget, "PUBLISH_FIXED_S", 0.0)
    config = _config(world["base"], time_budget_s=25.0)
    started = time.perf_counter()
    # When
    result = train(config, world["data"], tmp_path / "run", hooks=RunHooks(show_progress=False))
    spent = time.perf_counter() - started
    # Then: it stopped long before the recipe's steps, within its budget, and says why in metrics.json
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())["time_budget"]
    assert record["time_budget_s"] == 25.0 and record["stopped_by"] == "the time budget"
    assert 0 < record["steps_run"] < record["planned_steps"] and record["planned_steps"] >= 1000
    assert record["estimate"]["docs_per_s"] > 0
    assert spent <= 25.0 * 1.2, spent  # the estimate of what follows training held
    steps = [
        json.loads(line)["step"] for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()
    ]
    assert steps[-1] == record["steps_run"]
    evaluations = record["validation"]["evaluations"]
    assert evaluations[-1]["step"] == record["steps_run"]  # the last step is always measured
    best = max(evaluations, key=lambda e: e["ndcg@10"])
    assert record["chosen_checkpoint"]["step"] == best["step"]
    assert record["chosen_checkpoint"]["ndcg@10"] == best["ndcg@10"]
    assert result.train_seconds > 0
    # the config travels with the run: its budget too
    assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["time_budget_s"] == 25.0


def test_a_budget_too_small_for_the_encode_fails_before_training(world, tmp_path):
    config = _config(world["base"], time_budget_s=1.0)
    with pytest.raises(BudgetTooSmall, match=r"time budget 1s is too small: .* give at least \d+s"):
        train(config, world["data"], tmp_path / "run", hooks=RunHooks(show_progress=False))
    assert not (tmp_path / "run" / "model").exists() and not (tmp_path / "run" / "train_log.jsonl").exists()


def test_the_best_checkpoint_is_restored_not_the_last(world):
    # Given: the validation pool of a real carve, and the base model evaluated as step 1
    data = load_split(world["data"], "train")
    _, val = carve_validation(data, 0.2, seed=0)
    pool = validation_pool(val, seed=0)
    assert pool is not None and len(pool.qids) > 0
    encoder = Encoder.load(world["base"])
    model, loss = encoder.model, torch.nn.Linear(1, 1)  # the loss's own state travels with the checkpoint
    loss.similarity = lambda: encoder.similarity  # type: ignore[assignment]
    checkpoints = BestCheckpoint(pool, every=1, eval_seq_length=32)
    first = checkpoints.evaluate(1, model, loss, 0.0)
    # When: the weights are wrecked (step 2 is far worse) and the loss's weight changed
    kept = loss.weight.detach().clone()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
        loss.weight.fill_(7.0)
    second = checkpoints.evaluate(2, model, loss, 1.0)
    assert second < first
    chosen = checkpoints.restore(model, loss, last_step=2)
    # Then: step 1's weights are back, and they measure what was recorded
    model.eval()  # as the trainer leaves it (evaluation put it back in training mode)
    assert chosen["step"] == 1 and chosen["ndcg@10"] == first and "last step's was lower" in chosen["why"]
    assert pool_ndcg(encoder, pool) == pytest.approx(first, abs=1e-6)
    assert torch.equal(loss.weight, kept)


def test_the_published_model_is_the_chosen_checkpoint(world, monkeypatch):
    from training.publish.pipeline import run_pipeline

    # Given: a pipeline with a budget (no ONNX, no distilled encoders: what is published is the point)
    monkeypatch.setattr(budget, "PUBLISH_FIXED_S", 0.0)
    monkeypatch.setattr(budget, "PUBLISH_PER_DOC_S", 0.0)
    bundles = world["root"] / "bundles"
    publish = PublishPlan(
        data=DataPlan(data_dir=str(world["data"])),
        index=IndexPlan(kind="flat"),
        publication=PublicationPlan(bundles_dir=str(bundles), onnx=False, distill=False, force=True),
    )
    plan = retrain_plan(
        _config(world["base"], time_budget_s=25.0, lr=3e-4), QueryRetrainConfig(), publish, "full"
    )
    # When
    result = run_pipeline(plan, world["root"] / "runs", RunHooks(show_progress=False))
    # Then: the published model measures, on the same pool, the validation nDCG@10 recorded as chosen
    assert result.publish.live
    version = bundles / result.publish.version
    manifest = json.loads((version / "manifest.json").read_text())
    record = manifest["extras"]["training_metrics"]["time_budget"]
    assert record["stopped_by"] == "the time budget" and record["steps_run"] < record["planned_steps"]
    assert manifest["training_config"]["config"]["time_budget_s"] == 25.0
    timings = json.loads((result.run_dir / "timings.json").read_text())
    assert timings["time_budget"]["chosen_checkpoint"] == record["chosen_checkpoint"]
    _, val = carve_validation(load_split(world["data"], "train"), 0.2, seed=0)
    pool = validation_pool(val, seed=0)
    assert pool is not None
    published = Encoder.load(version / "model")
    published.model.max_seq_length = 32
    assert pool_ndcg(published, pool) == pytest.approx(record["chosen_checkpoint"]["ndcg@10"], abs=1e-4)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90.0), ("10m", 600.0), ("1h", 3600.0), ("1.5h", 5400.0), ("600", 600.0)]
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5m", "0", "inf", "nan", "1h30m"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "training", *args]
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("command", ["train", "pipeline"])
def test_the_cli_refuses_a_bad_time_budget_naming_the_option(world, tmp_path, command):
    where = ["--out", str(tmp_path / "run")] if command == "train" else ["--bundles", str(tmp_path / "b")]
    assert "--time-budget" in _cli(command, "--help").stdout
    for bad, says in [("abc", "'abc' is not a duration"), ("200h", "less than or equal to 604800")]:
        done = _cli(command, "--data", str(world["data"]), *where, "--time-budget", bad)
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 2 and last.startswith("error: invalid option --time-budget: ")
        assert says in last


def test_the_cli_says_in_one_line_when_the_budget_is_too_small(world, tmp_path):
    done = _cli(
        "train", "--data", str(world["data"]), "--out", str(tmp_path / "run"), "--base-model", world["base"],
        "--time-budget", "2s", "--quiet", "--no-report",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: time budget 2s is too small") and "give at least" in last
