"""VectorIndex against a brute-force numpy oracle, on seeded clustered data (real FAISS throughout)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

import contract.index.vector_index as index_mod
import training.export.index_factory as build_mod
from contract.encoding.encoder import Encoder, Similarity
from contract.errors import IndexBuildError, InvalidQuery
from contract.index.vector_index import IndexInfo, VectorIndex
from training.export.index_factory import build_index, choose_kind

N, D, NQ, K = 2_000, 32, 40, 10


def _clustered(n: int, d: int, seed: int) -> np.ndarray:
    # a Gaussian mixture on the sphere: like text embeddings, unlike isotropic noise (bench/index/index_bench.py)
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, d))
    x = centres[rng.integers(0, 40, n)] + 0.6 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    x = _clustered(N, D, 0)
    rng = np.random.default_rng(1)
    q = x[rng.choice(N, NQ, replace=False)] + 0.2 * rng.normal(size=(NQ, D)).astype(np.float32)
    return x, (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def oracle_scores(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """(nq, n) model similarity: inner product, or −½·squared L2 (computed in float64)."""
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    if metric == "ip":
        return q64 @ x64.T
    return -0.5 * ((q64[:, None, :] - x64[None, :, :]) ** 2).sum(-1)


def oracle_top(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


KINDS = ["flat", "hnsw", "ivf", "ivfpq"]
METRICS = ["ip", "l2"]


@pytest.fixture(scope="module")
def built(data) -> dict[tuple[str, str], VectorIndex]:
    x, q = data
    return {(k, m): build_index(x, metric=m, kind=k, tune_queries=q, seed=0) for k in KINDS for m in METRICS}


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("kind", KINDS)
def test_search_matches_bruteforce_oracle(built, data, kind, metric):
    x, q = data
    vi = built[(kind, metric)]
    scores = oracle_scores(x, q, metric)
    truth = oracle_top(scores, K)
    results = vi.search(q, K)
    assert len(results) == NQ
    recalls = []
    for i, (pos, sc) in enumerate(results):
        assert pos.dtype == np.int64 and sc.dtype == np.float32
        assert len(pos) == K and (pos >= 0).all()
        assert np.all(np.diff(sc) <= 1e-6), "best first"
        # every index type returns exact scores for the ids it returns (ivfpq: after exact re-ranking)
        np.testing.assert_allclose(sc, scores[i, pos], rtol=1e-4, atol=1e-4)
        if kind == "flat":
            np.testing.assert_array_equal(pos, truth[i])
        recalls.append(len(np.intersect1d(pos, truth[i])) / K)
    min_recall = 1.0 if kind == "flat" else 0.9
    assert np.mean(recalls) >= min_recall
    info = vi.info
    assert info.kind == kind and info.metric == metric and info.ntotal == N and info.dim == D
    if kind != "flat":
        assert info.recall_at_10 is not None and info.recall_at_10 >= 0.95
        assert info.params  # the tuned efSearch / nprobe / k_factor is recorded


def test_ivfpq_keeps_codes_small_and_reranks(built):
    info = built[("ivfpq", "ip")].info
    assert "RFlat" in info.factory and "PQ" in info.factory
    assert info.resident_bytes_per_vector is not None
    assert info.resident_bytes_per_vector < 0.5 * 4 * D  # codes + ids, the full vectors are re-rank only
    assert set(info.params) == {"nprobe", "k_factor"}


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(built, data, tmp_path, kind):
    _, q = data
    vi = built[(kind, "l2")]
    path = vi.save(tmp_path / "index.faiss")
    assert not list(tmp_path.glob(".*tmp")), "no temp file left behind"
    for mmap in (False, True):
        loaded = VectorIndex.load(path, vi.info, mmap=mmap)
        assert loaded.info == vi.info
        for (p1, s1), (p2, s2) in zip(vi.search(q, K), loaded.search(q, K), strict=True):
            np.testing.assert_array_equal(p1, p2)
            np.testing.assert_allclose(s1, s2, rtol=1e-6)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_k_larger_than_ntotal_never_returns_minus_one(kind):
    x = _clustered(7, 8, 3)
    vi = build_index(x, metric="ip", kind=kind)
    (pos, sc), *_ = vi.search(x[:2], 50)
    assert sorted(pos.tolist()) == list(range(7)) and len(sc) == 7
    (pos, _), *_ = vi.search(x[:1], 50, allowed=np.array([1, 4, 6]))
    assert sorted(pos.tolist()) == [1, 4, 6]
    (pos, _), *_ = vi.search(x[:1], 5, allowed=np.array([], dtype=np.int64))
    assert len(pos) == 0


@pytest.mark.parametrize("force_selector", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_allowed_filter_matches_oracle(built, data, monkeypatch, kind, force_selector):
    """Filtered search returns only allowed rows; the exact path equals the oracle restricted to them."""
    if force_selector:  # exercise FAISS's IDSelector path instead of the exact small-subset path
        monkeypatch.setattr(index_mod, "EXACT_FILTER_MAX", 0)
    x, q = data
    vi = built[(kind, "ip")]
    allowed = np.random.default_rng(5).choice(N, 600, replace=False)
    scores = oracle_scores(x, q, "ip")
    restricted = np.full_like(scores, -np.inf)
    restricted[:, allowed] = scores[:, allowed]
    truth = oracle_top(restricted, K)
    recalls = []
    for i, (pos, sc) in enumerate(vi.search(q, K, allowed=allowed)):
        assert len(pos) == K and np.isin(pos, allowed).all()
        np.testing.assert_allclose(sc, scores[i, pos], rtol=1e-4, atol=1e-4)
        recalls.append(len(np.intersect1d(pos, truth[i])) / K)
    exact = kind == "flat" or not force_selector
    assert np.mean(recalls) >= (1.0 if exact else 0.85)


def test_aninfonce_ranking_equals_faiss_l2_on_scaled_vectors(shared_encoder, data):
    """−½(u−v)ᵀdiag(Λ)(u−v) ranks like FAISS L2 on √Λ-scaled vectors, with equal scores."""
    x, q = data
    dim = shared_encoder.dim
    rng = np.random.default_rng(7)
    lam = rng.uniform(0.2, 5.0, size=dim)
    enc = Encoder(shared_encoder.model, Similarity(metric="aninfonce", lam=lam.tolist()))
    u = _clustered(500, dim, 11)  # documents, normalised like Encoder.encode output
    v = _clustered(20, dim, 12)  # queries
    learned = -0.5 * (((v[:, None, :] - u[None, :, :]) ** 2) * lam).sum(-1)  # (20, 500) closed form
    np.testing.assert_allclose(enc.similarity_matrix(v, u), learned, rtol=1e-4, atol=1e-4)
    vi = build_index(enc.to_index_space(u), metric=enc.index_metric, kind="flat")
    assert enc.index_metric == "l2"
    truth = oracle_top(learned, K)
    for i, (pos, sc) in enumerate(vi.search(enc.to_index_space(v), K)):
        np.testing.assert_array_equal(pos, truth[i])
        np.testing.assert_allclose(sc, learned[i, pos], rtol=1e-4, atol=1e-4)


def test_auto_follows_size_and_memory_budget(data):
    assert choose_kind(1_000, 384) == "flat"
    assert choose_kind(500_000, 384) == "hnsw"
    assert choose_kind(500_000, 384, memory_budget_bytes=int(1.6e3 * 500_000)) == "ivf"
    assert choose_kind(1_000, 384, memory_budget_bytes=100 * 1_000) == "ivfpq"
    with pytest.raises(IndexBuildError, match="memory budget"):
        choose_kind(1_000, 384, memory_budget_bytes=1_000)
    x, _ = data
    assert build_index(x, kind="auto").info.kind == "flat"
    small = build_index(x, kind="auto", memory_budget_bytes=N * 4 * D // 4)
    assert small.info.kind == "ivfpq" and small.info.recall_at_10 >= 0.95


def test_tuning_without_queries_uses_held_out_corpus_rows(data):
    x, _ = data
    vi = build_index(x, kind="hnsw", target_recall=0.99)
    assert vi.info.tune_queries == 1_000 and vi.info.recall_at_10 >= 0.99


def test_bad_input_is_a_clear_error(data, built):
    x, q = data
    bad = x.copy()
    bad[3, 0] = np.nan
    with pytest.raises(IndexBuildError, match="NaN"):
        build_index(bad)
    with pytest.raises(IndexBuildError, match="unknown index kind"):
        build_index(x, kind="lsh")
    with pytest.raises(InvalidQuery, match="dimension 5"):
        built[("flat", "ip")].search(np.zeros((1, 5), np.float32), 3)
    with pytest.raises(InvalidQuery, match="allowed positions"):
        built[("flat", "ip")].search(q[:1], 3, allowed=np.array([N + 5]))


def test_load_refuses_garbage(tmp_path):
    bad = tmp_path / "index.faiss"
    bad.write_bytes(b"not an index")
    with pytest.raises(IndexBuildError, match="not a readable FAISS index"):
        VectorIndex.load(
            bad, IndexInfo(factory="Flat", kind="flat", metric="ip", ntotal=1, dim=1, bytes_per_vector=4)
        )


def test_opq_front_end_above_ten_thousand_vectors(monkeypatch):
    """With OPQ in front (opt-in, >= 39·256 vectors) plain and filtered (IDSelector) search still work."""
    monkeypatch.setattr(index_mod, "EXACT_FILTER_MAX", 0)
    monkeypatch.setattr(build_mod, "USE_OPQ", True)
    x = _clustered(10_000, 8, 21)
    q = x[:20] + 0.05 * np.random.default_rng(2).normal(size=(20, 8)).astype(np.float32)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # OPQ training's OpenMP loops crawl on a shared 2-core box
    try:
        vi = build_index(x, kind="ivfpq", tune_queries=q)
    finally:
        faiss.omp_set_num_threads(threads)
    assert vi.info.factory.startswith("OPQ") and vi.info.recall_at_10 >= 0.95
    allowed = np.arange(0, 10_000, 2)
    scores = oracle_scores(x, q, "ip")
    for i, (pos, sc) in enumerate(vi.search(q, K, allowed=allowed)):
        assert len(pos) == K and (pos % 2 == 0).all()
        np.testing.assert_allclose(sc, scores[i, pos], rtol=1e-4, atol=1e-4)
