"""GET /generalization-gap on a hybrid AnInfoNCE bundle: the model's temperature is one number in the
response, the report and the manifest (contract.encoding.similarity), and the retrieval section lists every
search mode the bundle has with the served one marked."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.bundles.bundle import read_manifest
from contract.encoding.encoder import Encoder
from contract.encoding.similarity import Similarity
from tests.app.conftest import make_settings, publish


@pytest.fixture(scope="module")
def aninfonce_bundle(tmp_path_factory, shared_encoder, slice_data, doc_embeddings):
    """The slice under a random anisotropic Λ, with its own gap report and a BM25 index (modes tuned)."""
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, BundleRecord, build_bundle
    from training.data.validation_carve import carve_validation
    from training.gap.report import CorpusVectors, ReportOptions, compute_report, write_report
    from training.hybrid.lexical_step import attach_lexical

    lam = np.random.default_rng(0).uniform(5.0, 25.0, shared_encoder.dim)
    similarity = Similarity(metric="aninfonce", temperature=None, learned=True, lam=lam.tolist())
    encoder = Encoder(shared_encoder.model, similarity, source=shared_encoder.source)
    train, validation = carve_validation(slice_data, 0.5, seed=0)
    report = compute_report(
        encoder, train, slice_data, ReportOptions(k=7, n_boot=50, k_max=16),
        corpus=CorpusVectors(list(slice_data.corpus), doc_embeddings),
    )  # fmt: skip
    root = tmp_path_factory.mktemp("gap-route")
    write_report(report, root / "report")
    folder = build_bundle(
        encoder,
        slice_data.corpus,
        staging_dir=root / "G",
        doc_embeddings=doc_embeddings,
        record=BundleRecord(report_dir=root / "report"),
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )
    query_emb = encoder.encode(list(slice_data.queries.values()), kind="query")
    attach_lexical(folder, encoder, slice_data, doc_embeddings, query_emb, validation)
    bundles = root / "bundles"
    publish(folder, bundles)
    return bundles, folder, lam


def test_one_temperature_and_every_mode_with_the_served_one_marked(aninfonce_bundle):
    bundles, folder, lam = aninfonce_bundle
    manifest = read_manifest(folder)
    with TestClient(create_app(make_settings(bundles))) as client:
        r = client.get("/generalization-gap")
    assert r.status_code == 200, r.text
    body = r.json()
    tau = 1.0 / lam.max()
    assert body["model"]["temperature"] == pytest.approx(tau)  # was null for AnInfoNCE
    assert body["report"]["model"]["temperature_effective"] == pytest.approx(tau)
    assert manifest.similarity is not None
    assert manifest.similarity.effective_temperature() == pytest.approx(tau)

    rows = body["report"]["retrieval"]["by_mode"]
    assert [row["mode"] for row in rows] == ["dense", "lexical", "hybrid"]
    served = manifest.extras["retrieval"]["default_mode"]
    assert [row["mode"] for row in rows if row["served"]] == [served]
    for row in rows:
        recorded = manifest.metrics[f"test.{row['mode']}"]
        assert row["ndcg_at_10"] == pytest.approx(recorded["ndcg@10"])
        assert row["metrics"] == pytest.approx(recorded)
    # lexical ranks differently from dense: the rows are the modes' own numbers, not one copied
    assert rows[0]["ndcg_at_10"] != pytest.approx(rows[1]["ndcg_at_10"])
    assert (folder / "report" / "report.json").read_text().count('"by_mode": []') == 1  # filled when served


def test_a_bundle_from_before_hybrid_search_lists_its_dense_mode_only():
    from types import SimpleNamespace

    from app.api.routes.gap import mode_rows

    old = SimpleNamespace(
        manifest=SimpleNamespace(metrics={"test": {"ndcg@10": 0.6, "recall@10": 0.7}}, extras={}),
        lexical=None,
    )
    (row,) = mode_rows(old)  # type: ignore[arg-type]
    assert row.mode == "dense" and row.served and row.ndcg_at_10 == 0.6 and row.mrr_at_10 is None
