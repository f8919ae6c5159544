"""HalfScan (contract/index/half_scan.py): a loaded flat index's fp16 scan answers exactly what fp32 search
answers, against a float64 brute-force oracle; its error bound holds; near-ties fall back to fp32 search."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from contract.index.half_scan import HALF_SCAN_FROM_BYTES, HalfScan
from contract.index.vector_index import SGEMM_FROM, IndexInfo, VectorIndex, faiss_search

D = 96
N = HALF_SCAN_FROM_BYTES // (4 * D) + 500  # just over the size the copy is kept from


def _clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(60, D))
    x = centres[rng.integers(0, 60, n)] + 0.6 * rng.normal(size=(n, D))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _loaded(x: np.ndarray, tmp_path, metric: int = faiss.METRIC_INNER_PRODUCT) -> VectorIndex:
    flat = faiss.IndexFlat(x.shape[1], metric)
    flat.add(x)
    info = IndexInfo(
        factory="Flat",
        kind="flat",
        metric="ip" if metric == faiss.METRIC_INNER_PRODUCT else "l2",
        ntotal=len(x),
        dim=x.shape[1],
        bytes_per_vector=4.0 * x.shape[1],
    )
    path = VectorIndex(flat, info).save(tmp_path / "index.faiss")
    loaded = VectorIndex.load(path, info)
    loaded.keep_half_copy()  # as a server does with SEARCH_INDEX_HALF_SCAN on
    return loaded


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return _clustered(N, 0)


@pytest.fixture(scope="module")
def queries(corpus) -> np.ndarray:
    rng = np.random.default_rng(1)
    q = corpus[rng.choice(N, 30, replace=False)] + 0.3 * rng.normal(size=(30, D)).astype(np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_single_queries_match_the_bruteforce_oracle(corpus, queries, tmp_path, k):
    vi = _loaded(corpus, tmp_path)
    assert vi.half is not None
    exact = queries.astype(np.float64) @ corpus.astype(np.float64).T  # (nq, n)
    for i, q in enumerate(queries):
        [(pos, sc)] = vi.search(q[None], k)
        want = np.argsort(-exact[i], kind="stable")[:k]
        assert pos.tolist() == want.tolist()
        np.testing.assert_allclose(sc, exact[i][want], atol=1e-5)
    assert vi.half.fallbacks == 0  # clustered data has no near-ties at these ranks
    assert vi.half.usage() == {"bytes": N * D * 2, "searches": len(queries), "fallbacks": 0}


def test_the_error_bound_holds_for_every_vector(corpus, queries):
    flat = faiss.IndexFlatIP(D)
    flat.add(corpus)
    half = HalfScan.build(flat)
    assert half is not None
    approx, pos = half.half.search(queries * 3.0, N)  # every vector's fp16 score, unnormalised queries too
    for i, q in enumerate(queries * 3.0):
        true = corpus[pos[i]].astype(np.float64) @ q.astype(np.float64)
        error = np.abs(approx[i] - true).max()
        assert 0 < error <= half.epsilon(q)


def test_near_ties_fall_back_to_the_fp32_search(corpus, tmp_path):
    x = corpus.copy()
    rng = np.random.default_rng(2)
    x[:40] = x[0] + 1e-6 * rng.normal(size=(40, D)).astype(np.float32)  # 40 vectors within fp16's rounding
    vi = _loaded(x, tmp_path)
    assert vi.half is not None
    q = x[:1]
    [(pos, sc)] = vi.search(q, 10)
    assert vi.half.fallbacks == 1
    dist, want = faiss_search(vi.index, q, 10)  # the fp32 search's own answer, tie order included
    assert pos.tolist() == want[0].tolist()
    np.testing.assert_array_equal(sc, dist[0])
    excluded = np.array([0, 1, 2, 7])
    [(pos, sc)] = vi.search(q, 10, excluded=excluded)  # the fallback keeps the deletions out too
    assert vi.half.fallbacks == 2
    half, vi.half = vi.half, None
    [(want_pos, want_sc)] = vi.search(q, 10, excluded=excluded)  # the fp32 path
    assert pos.tolist() == want_pos.tolist() and not set(pos.tolist()) & {0, 1, 2, 7}
    np.testing.assert_array_equal(sc, want_sc)
    vi.half = half


def test_batches_keep_the_fp32_path(corpus, queries, tmp_path):
    vi = _loaded(corpus, tmp_path)
    batch = queries[:SGEMM_FROM]
    got = vi.search(batch, 10)  # sgemm over the fp32 vectors
    dist, want = vi.index.search(batch, 10)
    assert [p.tolist() for p, _ in got] == want.tolist()
    assert vi.half is not None and vi.half.searches == 0


@pytest.mark.parametrize("every", [3, 997])  # a third of the corpus; 12 documents, fewer than k + margin
def test_filtered_searches_match_the_bruteforce_oracle(corpus, queries, tmp_path, every):
    """A metadata filter's allowed positions go to the fp16 scan as an id selector: brute force over them."""
    vi = _loaded(corpus, tmp_path)
    allowed = np.arange(0, N, every)
    exact = queries.astype(np.float64) @ corpus[allowed].astype(np.float64).T  # (nq, n_allowed)
    for i, q in enumerate(queries[:10]):
        [(pos, sc)] = vi.search(q[None], 10, allowed=allowed)
        want = np.argsort(-exact[i], kind="stable")[:10]
        assert pos.tolist() == allowed[want].tolist()
        np.testing.assert_allclose(sc, exact[i][want], atol=1e-5)
    assert vi.half is not None and vi.half.searches == 10


def test_no_copy_where_it_does_not_pay_or_cannot_be_exact(corpus, tmp_path):
    assert _loaded(corpus[: N // 2], tmp_path).half is None  # under HALF_SCAN_FROM_BYTES
    assert _loaded(corpus, tmp_path, faiss.METRIC_L2).half is None  # the bound is for inner products
    big = corpus.copy()
    big[5, 0] = 1e5  # beyond fp16's range
    assert _loaded(big, tmp_path).half is None


def test_deleted_documents_are_left_out_exactly(corpus, queries, tmp_path):
    """Deleted positions (the overlay's `excluded`) go to the fp16 scan as an id selector: the answer is
    brute force over what is left, each true top hit deleted in turn included."""
    vi = _loaded(corpus, tmp_path)
    exact = queries.astype(np.float64) @ corpus.astype(np.float64).T  # (nq, n)
    for i, q in enumerate(queries[:10]):
        best = np.argsort(-exact[i], kind="stable")
        excluded = np.concatenate([best[:3], best[5:7], [N - 1]])  # the query's own best among them
        [(pos, sc)] = vi.search(q[None], 10, excluded=excluded)
        keep = best[~np.isin(best, excluded)][:10]
        assert pos.tolist() == keep.tolist()
        np.testing.assert_allclose(sc, exact[i][keep], atol=1e-5)
    assert vi.half is not None and vi.half.searches == 10 and vi.half.fallbacks == 0
