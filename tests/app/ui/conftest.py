"""Bundles for the page's tests: the API tests' demo-dataset slice with a real generalization-gap report.

The report is computed by training.gap.report on that slice (the real encoder; its 30 queries split into
15 "training" and 15 held-out ones, the document embeddings reused) and written with its real PNG plots,
so the page renders what a pipeline would write. Bundle A carries it and a BM25 index with its fusion
tuned on half the queries (training.hybrid.lexical_step, as `index` does), so every search mode is there
to show, and is live; bundle B (dense only, a worse recorded metric) is published through the gate and
kept as a candidate.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.app.conftest import publish

REPO = Path(__file__).resolve().parents[3]
SCREENSHOTS = REPO / "var" / "screenshots"  # /var/ is ignored by git
SAVED: list[Path] = []  # screenshots written in this session (the summary names their folder)


@pytest.fixture(scope="session")
def ui_staged(tmp_path_factory, shared_encoder, slice_data, doc_embeddings) -> dict[str, Path]:
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, BundleRecord, build_bundle
    from training.data.validation_carve import carve_validation
    from training.gap.report import CorpusVectors, ReportOptions, compute_report, write_report
    from training.hybrid.lexical_step import attach_lexical

    ids = sorted(slice_data.queries)
    half = len(ids) // 2

    def split(keep: list[str]):
        return replace(
            slice_data,
            queries={q: slice_data.queries[q] for q in keep},
            qrels={q: slice_data.qrels[q] for q in keep},
        )

    report = compute_report(
        shared_encoder,
        split(ids[:half]),
        split(ids[half:]),
        ReportOptions(k=15, n_boot=200, k_max=64, k_rule="batch size 16 − 1 (test slice)"),
        corpus=CorpusVectors(list(slice_data.corpus), doc_embeddings),
    )
    root = tmp_path_factory.mktemp("ui-staged")
    write_report(report, root / "report")
    build = BuildOptions(index=IndexPlan(kind="flat"), show_progress=False)
    a = build_bundle(
        shared_encoder,
        slice_data.corpus,
        staging_dir=root / "A",
        doc_embeddings=doc_embeddings,
        record=BundleRecord(report_dir=root / "report", metrics={"test": {"ndcg@10": 0.6}}),
        build=build,
    )
    query_emb = shared_encoder.encode(list(slice_data.queries.values()), kind="query")
    validation = carve_validation(slice_data, 0.5, seed=0)[1]
    attach_lexical(a, shared_encoder, slice_data, doc_embeddings, query_emb, validation)
    b = build_bundle(
        shared_encoder,
        slice_data.corpus,
        staging_dir=root / "B",
        doc_embeddings=doc_embeddings,
        record=BundleRecord(metrics={"test": {"ndcg@10": 0.1}}),
        build=build,
    )
    return {"A": a, "B": b}


@pytest.fixture(scope="session")
def ui_bundles(tmp_path_factory, ui_staged) -> tuple[Path, str, str]:
    """(bundles folder, live version A, candidate version B that the gate kept out)."""
    bundles = tmp_path_factory.mktemp("ui-bundles")
    live = publish(ui_staged["A"], bundles)
    candidate = publish(ui_staged["B"], bundles, force=False)
    return bundles, live, candidate


def pytest_terminal_summary(terminalreporter) -> None:
    if SAVED:
        terminalreporter.write_line(f"page screenshots ({len(SAVED)}): {SCREENSHOTS}")
