"""Per-query routing's curve and margins against brute force (contract/encoding/routing.py)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from contract.encoding.routing import NO_MARGIN, operating_point, routing_curve, top2_margins
from contract.index.vector_index import IndexInfo, VectorIndex


def _flat(docs: np.ndarray) -> VectorIndex:
    flat = faiss.IndexFlatIP(docs.shape[1])
    flat.add(docs)
    info = IndexInfo(
        factory="Flat",
        kind="flat",
        metric="ip",
        ntotal=len(docs),
        dim=docs.shape[1],
        bytes_per_vector=4.0 * docs.shape[1],
    )
    return VectorIndex(flat, info)


def test_margins_are_the_gap_between_the_two_best_scores():
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((40, 8)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    index = _flat(docs)
    queries = rng.standard_normal((5, 8)).astype(np.float32)
    scores = np.sort(queries @ docs.T, axis=1)[:, ::-1]  # (5, 40) best first
    np.testing.assert_allclose(top2_margins(index, queries), scores[:, 0] - scores[:, 1], atol=1e-5)

    lone = _flat(docs[:1])
    assert top2_margins(lone, queries[:2]).tolist() == [NO_MARGIN, NO_MARGIN]  # one document: sure


def test_each_point_routes_the_least_confident_queries_and_scores_the_mixture():
    rng = np.random.default_rng(1)
    n = 23
    margins = rng.random(n)
    cheap, full = rng.random(n), rng.random(n)
    curve = routing_curve(margins, cheap.tolist(), full.tolist(), points=5)
    assert curve[0]["share"] == 0 and curve[-1]["share"] == 1
    assert curve[0]["ndcg@10"] == pytest.approx(cheap.mean(), abs=1e-6)
    assert curve[-1]["ndcg_loss"] == pytest.approx(0.0, abs=1e-6)
    for point in curve:  # brute force: route what the threshold routes, score the mixture
        routed = margins < point["margin"]
        assert routed.sum() == round(point["share"] * n)
        mixed = np.where(routed, full, cheap).mean()
        assert point["ndcg@10"] == pytest.approx(mixed, abs=1e-6)
        assert point["ndcg_loss"] == pytest.approx(full.mean() - mixed, abs=1e-6)


def test_the_operating_point_is_the_smallest_share_within_the_budget():
    curve = [
        {"share": 0.0, "margin": 0.0, "ndcg@10": 0.5, "ndcg_loss": 0.03},
        {"share": 0.2, "margin": 0.01, "ndcg@10": 0.52, "ndcg_loss": 0.008},
        {"share": 0.4, "margin": 0.02, "ndcg@10": 0.53, "ndcg_loss": 0.004},
        {"share": 1.0, "margin": 2.0, "ndcg@10": 0.53, "ndcg_loss": 0.0},
    ]
    assert operating_point({"curve": curve}, 0.01)["share"] == 0.2
    assert operating_point({"curve": curve}, 0.005)["share"] == 0.4
    assert operating_point({"curve": curve}, -0.1) is None
