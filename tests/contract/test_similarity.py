"""contract.encoding.similarity: one temperature per model, the same in the training log, the gap report and the
manifest; similarity.json files from before `learned` existed still load."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from contract.bundles.bundle import read_manifest
from contract.encoding.encoder import Encoder
from contract.encoding.similarity import Similarity
from contract.errors import ModelLoadError
from training.data.retrieval_data import Document, RetrievalData
from training.gap.sections import model_identity
from training.losses.an_info_nce import AnInfoNCELoss, inverse_softplus
from training.losses.info_nce import InfoNCELoss
from training.train.step import temperature_summary


def test_infonce_temperature_is_tau_and_aninfonce_is_one_over_max_lambda():
    assert Similarity(metric="cosine", temperature=0.07).effective_temperature() == 0.07
    assert Similarity(metric="cosine", temperature=None).effective_temperature() is None
    lam = [5.0, 25.0, 10.0]
    sim = Similarity(metric="aninfonce", temperature=None, lam=lam, learned=True)
    assert sim.effective_temperature() == pytest.approx(1 / 25)
    assert sim.logit_temperature() == 1.0 and sim.kind == "aninfonce"
    # isotropic Λ = λ·I is InfoNCE at τ = 1/λ
    assert Similarity(metric="aninfonce", lam=[20.0] * 4).effective_temperature() == pytest.approx(0.05)


def test_old_similarity_json_loads_and_round_trips():
    old_aninfonce = {"metric": "aninfonce", "temperature": None, "lambda": [1.0, 2.0]}
    sim = Similarity.from_json(old_aninfonce)
    assert sim.learned is True  # Λ is always learned
    assert Similarity.from_json({"metric": "cosine", "temperature": 0.05}).learned is False
    assert Similarity.from_json(sim.to_json()) == sim
    assert Similarity.from_json({"metric": "cosine", "future_key": 1}).extra == {"future_key": 1}
    with pytest.raises(ModelLoadError, match="lambda"):
        Similarity.from_json({"metric": "aninfonce"})


def _toy_data() -> RetrievalData:
    corpus = {
        f"d{i}": Document(f"d{i}", "", f"document number {i} about topic {i % 3}", {}) for i in range(12)
    }
    queries = {f"q{i}": f"topic {i % 3} number {i}" for i in range(4)}
    return RetrievalData(
        corpus=corpus, queries=queries, qrels={f"q{i}": {f"d{i}": 1} for i in range(4)}, source="toy"
    )


@pytest.mark.parametrize("kind", ["infonce_learned", "aninfonce"])
def test_training_log_report_and_manifest_agree_on_the_temperature(kind, shared_encoder, tmp_path):
    if kind == "aninfonce":
        loss_fn: InfoNCELoss | AnInfoNCELoss = AnInfoNCELoss(shared_encoder.dim, init_temperature=0.05)
        lam = np.random.default_rng(0).uniform(5.0, 25.0, shared_encoder.dim)
        with torch.no_grad():
            loss_fn.w.copy_(inverse_softplus(torch.tensor(lam)).float())
    else:
        loss_fn = InfoNCELoss(0.05, learn_temperature=True)
        with torch.no_grad():
            loss_fn.log_scale.fill_(math.log(1 / 0.08))
    logged = temperature_summary(loss_fn)["temperature"]
    encoder = Encoder(shared_encoder.model, loss_fn.similarity(), source=shared_encoder.source)
    assert encoder.similarity.learned
    identity = model_identity(encoder)
    assert identity.temperature_effective == pytest.approx(logged, rel=1e-9)

    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, build_bundle

    data = _toy_data()
    staged = build_bundle(
        encoder,
        data.corpus,
        staging_dir=tmp_path / "b",
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )
    manifest = read_manifest(staged)
    assert manifest.similarity is not None
    assert manifest.similarity.effective_temperature() == pytest.approx(logged, rel=1e-9)
    reloaded = Encoder.load(staged / "model")
    assert reloaded.similarity == manifest.similarity


def test_similarity_scores_index_space_and_index_scores_agree_with_brute_force():
    """Similarity owns scoring: its scores are the closed forms, and an index over its index space answers
    them (FAISS's squared L2 made into −½·d² by the one conversion)."""
    import faiss

    from contract.encoding.similarity import index_scores

    rng = np.random.default_rng(0)
    u = rng.standard_normal((5, 8)).astype(np.float32)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v = rng.standard_normal((7, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    lam = rng.uniform(1.0, 30.0, 8)
    aninfonce = Similarity(metric="aninfonce", temperature=None, lam=[float(x) for x in lam])
    brute = -0.5 * (lam * (u[:, None, :] - v[None, :, :]) ** 2).sum(-1)  # (5, 7)
    assert aninfonce.scores(u, v) == pytest.approx(brute, rel=1e-4, abs=1e-4)
    assert Similarity().scores(u, v) == pytest.approx(u @ v.T)
    for sim in (Similarity(), aninfonce):
        index = faiss.IndexFlat(
            8, faiss.METRIC_L2 if sim.index_metric == "l2" else faiss.METRIC_INNER_PRODUCT
        )
        index.add(sim.to_index_space(v))
        raw, pos = index.search(sim.to_index_space(u), 7)  # (5, 7) each, best first
        answered = sim.index_scores(raw)
        assert np.array_equal(answered, index_scores(raw, sim.index_metric))
        assert answered == pytest.approx(np.take_along_axis(sim.scores(u, v), pos, 1), rel=1e-4, abs=1e-4)
    assert (Similarity().index_metric, aninfonce.index_metric) == ("ip", "l2")
    assert Similarity().identity_index_space and not aninfonce.identity_index_space


def test_one_default_temperature_everywhere():
    from contract.config import TrainConfig
    from contract.encoding.similarity import DEFAULT_TEMPERATURE, temperature_or_default

    assert Similarity().temperature == Similarity.DEFAULT_TEMPERATURE == DEFAULT_TEMPERATURE
    assert TrainConfig().temperature == DEFAULT_TEMPERATURE
    assert InfoNCELoss().temperature == pytest.approx(DEFAULT_TEMPERATURE)
    assert AnInfoNCELoss(4).init_temperature == DEFAULT_TEMPERATURE
    assert temperature_or_default(None) == DEFAULT_TEMPERATURE and temperature_or_default(0.2) == 0.2
    # what a risk divides by: τ (the default when none was recorded), 1 for AnInfoNCE
    assert Similarity(temperature=None).logit_divisor() == DEFAULT_TEMPERATURE
    assert Similarity(temperature=0.07).logit_divisor() == 0.07
    assert Similarity(metric="aninfonce", temperature=None, lam=[2.0]).logit_divisor() == 1.0
