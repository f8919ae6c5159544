"""A small real bundle for the API tests, built once per session from a slice of the demo dataset
(tests/conftest.py: the standard library's docstrings, one relevant document per query).

30 test queries with their relevant documents plus 200 distractors (230 documents, each at most 1000
characters), encoded with the real all-MiniLM-L6-v2 and written with contract.bundles.bundle into a flat (exact) FAISS index. Every
document gets metadata (`year`, `group`, `even`) so filters can be tested. Bundle A also carries the
ONNX query encoders (fp32 + int8, with their measured nDCG@10 loss) and a generalization-gap report;
bundle B is the same corpus without them (a second version for swaps).

Published copies are hard links of the staged files, so each test's bundles folder costs no copying.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.settings import Settings

N_QUERIES = 30
N_DISTRACTORS = 200


def doc_metadata(i: int) -> dict[str, object]:
    return {"year": 2000 + i % 20, "group": "abc"[i % 3], "even": i % 2 == 0}


@pytest.fixture(scope="session")
def slice_data(demo_dataset):
    from training.data.beir import load_beir
    from training.data.query_sample import subset

    data = subset(load_beir(demo_dataset, "test"), n_queries=N_QUERIES, n_distractors=N_DISTRACTORS, seed=0)
    data.corpus = {
        d: replace(doc, metadata=doc_metadata(i)) for i, (d, doc) in enumerate(data.corpus.items())
    }
    return data


@pytest.fixture(scope="session")
def doc_embeddings(shared_encoder, slice_data) -> np.ndarray:
    from training.eval.evaluate import encode_corpus

    _, emb = encode_corpus(shared_encoder, slice_data.corpus, show_progress=False)
    return emb  # (n_docs, 384), rows in corpus order


def _gap_report(encoder):
    """A schema-valid report (test input: the endpoint must serve whatever report the bundle holds)."""
    from contract.bundles.report_schema import (
        Bound,
        Estimate,
        GapReport,
        InverseKFit,
        KSufficient,
        ModelIdentity,
        RiskAtK,
        Term,
        TheoryTerms,
    )

    est = Estimate(value=0.1, ci_low=0.05, ci_high=0.15, method="bootstrap (test fixture)")
    bound = Bound(value=1.0, assumptions="test fixture")
    return GapReport(
        model=ModelIdentity(
            path="", name="all-MiniLM-L6-v2", metric="cosine", temperature=0.05, temperature_effective=0.05
        ),
        k=31,
        k_rule="batch size - 1",
        negative_sampler="random",
        n_train=10,
        n_test=10,
        n_train_queries=10,
        n_test_queries=10,
        n_train_split_queries=10,
        pool_size=300,
        seed=0,
        n_bootstrap=100,
        risk_train=est,
        risk_test=est,
        gap=est,
        hoeffding_halfwidth=bound,
        k_grid_rule="k ≤ pool/8",
        risk_vs_k=[RiskAtK(k=31, risk=est, delta=est)],
        fit=InverseKFit(a=0.1, b=1.0, r2=0.99, k_range=(1, 31), n_points=5, accepted=True, rule="test"),
        ce_inf_plugin=est,
        ce_inf_corrected=est,
        ce_inf_fit=est,
        k_sufficient=KSufficient(k=31),
        theory_terms=TheoryTerms(
            vacuous_threshold=3.47,
            sample_variability=Term(value=1.0, assumptions="test fixture"),
            finite_k_log=bound,
            prop1_upper=bound,
            not_computable=[],
        ),
        mi_sampler="positives of other held-out queries",
        mi_lower_bound_k=est,
        mi_cap_log_k_plus_1=bound,
        mi_cap_two_over_tau=bound,
        mi_lower_bound_inf=est,
    )


@pytest.fixture(scope="session")
def staged(tmp_path_factory, shared_encoder, slice_data, doc_embeddings) -> dict[str, Path]:
    """Two staged (unpublished) bundles: {"A": with ONNX + report, "B": plain}."""
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, BundleRecord, build_bundle
    from training.export.onnx_export import attach_onnx

    root = tmp_path_factory.mktemp("staged")
    report_dir = root / "report"
    report_dir.mkdir()
    (report_dir / "report.json").write_text(_gap_report(shared_encoder).model_dump_json(indent=2))
    build = BuildOptions(index=IndexPlan(kind="flat"), show_progress=False)
    a = build_bundle(
        shared_encoder,
        slice_data.corpus,
        staging_dir=root / "A",
        doc_embeddings=doc_embeddings,
        record=BundleRecord(report_dir=report_dir, metrics={"test": {"ndcg@10": 0.6}}),
        build=build,
    )
    attach_onnx(a, slice_data.queries, slice_data.qrels, quantize=True)
    # B records a worse test metric, so a plain publish keeps it as a candidate (not live)
    b = build_bundle(
        shared_encoder,
        slice_data.corpus,
        staging_dir=root / "B",
        doc_embeddings=doc_embeddings,
        record=BundleRecord(metrics={"test": {"ndcg@10": 0.1}}),
        build=build,
    )
    return {"A": a, "B": b}


def publish(staged_dir: Path, bundles: Path, *, force: bool = True) -> str:
    """Publish a hard-linked copy of a staged bundle into `bundles`; returns its version."""
    from training.bundle.store import BundleStore

    bundles.mkdir(parents=True, exist_ok=True)
    copy = (
        bundles / f".copy-{staged_dir.name}-{len(os.listdir(bundles))}"
    )  # not ".staging-": publish cleans those
    shutil.copytree(staged_dir, copy, copy_function=os.link)
    return BundleStore(bundles).publish(copy, force=force).version


def make_settings(bundles: Path, **overrides) -> Settings:
    # no gc.freeze: each freeze is one full collection of the test runner's heap, on every app start;
    # tests/app/bundles/test_heap_freeze.py turns it on
    base = dict(
        bundles_dir=bundles,
        api_key="test-key",
        reload_poll_seconds=0.1,
        encoder_backend="torch",
        gc_freeze_settle_s=0,
    )
    return Settings(**(base | overrides))


@pytest.fixture(scope="session")
def live_bundles(tmp_path_factory, staged) -> tuple[Path, str]:
    """A bundles folder where bundle A is published and live (shared read-only by the search tests)."""
    bundles = tmp_path_factory.mktemp("bundles-live")
    return bundles, publish(staged["A"], bundles)


def wait_until(
    condition, timeout: float = 30.0, what: str = "condition", *, interval: float = 0.05, detail=None
):
    """Poll `condition()` until truthy (returns its value) or fail after `timeout` seconds.

    `detail`, if given, is called on timeout and its text (a worker's log, say) ends the failure message.
    """
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    extra = f"\n{detail()}" if detail is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")


TINY_DISTILL = dict(
    layers=1,
    max_steps=3,
    title_queries=40,
    sentence_queries=40,
    static_init_vocab="seen",  # the full vocabulary costs ~10x more; what is served is the same code
)


@pytest.fixture(scope="session")
def staged_distilled(tmp_path_factory, staged, slice_data) -> Path:
    """Bundle A plus distilled query encoders (a 1-layer transformer and a static table, a few steps each),
    trained on corpus pseudo-queries only (titles, sentences), scored on the slice's queries."""
    from training.data.retrieval_data import RetrievalData
    from training.distill.bundle_step import attach_query_encoders
    from training.distill.config import DistillConfig

    folder = tmp_path_factory.mktemp("staged-distilled") / "A"
    shutil.copytree(staged["A"], folder)
    pseudo_only = RetrievalData(corpus=slice_data.corpus, queries={}, qrels={}, source="slice")
    attach_query_encoders(
        folder,
        pseudo_only,
        slice_data.queries,
        slice_data.qrels,
        config=DistillConfig(**TINY_DISTILL),
        new_version=True,
    )
    return folder


@pytest.fixture(scope="session")
def staged_lexical(tmp_path_factory, shared_encoder, slice_data, doc_embeddings) -> Path:
    """Bundle L: the slice with a BM25 index, its default mode and fusion tuned on half of its queries
    (training.hybrid.lexical_step, as `index` does; the other bundles are the pre-hybrid layout, dense only)."""
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, build_bundle
    from training.data.validation_carve import carve_validation
    from training.hybrid.lexical_step import attach_lexical

    root = tmp_path_factory.mktemp("staged-lexical")
    folder = build_bundle(
        shared_encoder,
        slice_data.corpus,
        staging_dir=root / "L",
        doc_embeddings=doc_embeddings,
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )
    query_emb = shared_encoder.encode(list(slice_data.queries.values()), kind="query")
    validation = carve_validation(slice_data, 0.5, seed=0)[1]
    attach_lexical(folder, shared_encoder, slice_data, doc_embeddings, query_emb, validation)
    return folder


WRITTEN = {"id": "zm-1", "title": "zebra marmalade", "text": "Zebra marmalade with quince and ginger.",
           "metadata": {"group": "z"}}  # fmt: skip


def check_a_write_in_every_mode(client, key: dict[str, str], version: str | None = None) -> None:
    """An acknowledged upsert is found by the very next search in every mode (the bundle's default, dense,
    lexical, hybrid), also under a filter on its metadata and not under another, and is gone from each
    after its acknowledged delete; with `version`, every answer came from that version."""
    modes = [None, "dense", "lexical", "hybrid"]  # None: the bundle's default mode

    def top(mode, **extra):
        body = {"query": "zebra marmalade", "top_k": 5, **extra} | ({"mode": mode} if mode else {})
        r = client.post("/search", json=body)
        assert r.status_code == 200, r.text
        assert version is None or r.json()["version"] == version
        return [h["id"] for h in r.json()["results"][0]["hits"]]

    for mode in modes:
        assert "zm-1" not in top(mode), mode
    # each search follows its acknowledged write with no pause: no consistency window to wait out
    assert client.post("/documents", json={"documents": [WRITTEN]}, headers=key).status_code == 200
    for mode in modes:
        assert top(mode)[0] == "zm-1", mode
        assert top(mode, filter={"group": "z"})[:1] == ["zm-1"], mode
        assert "zm-1" not in top(mode, filter={"group": "a"}), mode
    assert client.delete("/documents/zm-1", headers=key).status_code == 200
    for mode in modes:
        assert "zm-1" not in top(mode), mode
        assert "zm-1" not in top(mode, filter={"group": "z"}), mode
