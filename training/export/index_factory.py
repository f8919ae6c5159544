"""Build a FAISS index through a factory string: auto-choose the kind, build, tune to a recall target.

Index kinds (FAISS wiki, "Guidelines to choose an index"; measured trade-offs:
bench/index/index_bench.py):

- ``flat``  : ``Flat``, exact. 4·d bytes/vector. Default below ~200k vectors.
- ``hnsw``  : ``HNSW32,Flat``; knob efSearch. ~4·d + 2·32·4 bytes/vector, no training.
- ``ivf``   : ``IVF{nlist},Flat`` with nlist ≈ 4·√N; knob nprobe.
- ``ivfpq`` : ``IVF{nlist},PQ{m},RFlat``; knobs nprobe and k_factor. PQ alone caps at
  R@10 ≈ 0.65 on text embeddings (bench/index/index_bench.py), so the top k·k_factor PQ candidates are
  re-ranked exactly against the full vectors kept in the RFlat stage. Loaded with ``mmap=True`` those
  full vectors stay in the file's page cache, so resident memory is the PQ codes plus touched pages.
  OPQ in front (``USE_OPQ``) is off by default: its training took 35 s for 10k 16-d vectors on the
  2-core box and the exact re-ranking already recovers what OPQ would add to the PQ ranking.

Tuning (`_tune`): the kind's search knobs are tried from cheapest up until recall@10 against exact
search on the tuning queries (real queries when given, else held-out corpus rows) reaches the target;
the reached recall and the knobs are recorded in `IndexInfo`.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, get_args

import faiss
import numpy as np

from contract.defaults import TARGET_RECALL
from contract.errors import IndexBuildError
from contract.index.backend import IndexKind
from contract.index.vector_index import IndexInfo, IndexMetric, VectorIndex, as_matrix, faiss_metric
from training.export.shards import check_finite, chunks, exact_top_k

logger = logging.getLogger(__name__)

# How a bundle's vectors become an index (FAISS here, Milvus in milvus_build):
# (version, index-space vectors, tune queries or None) -> (IndexInfo, manifest extras)
IndexBuilder = Callable[[str, np.ndarray, np.ndarray | None], tuple[IndexInfo, dict[str, Any]]]

KINDS: tuple[str, ...] = get_args(IndexKind)
AUTO_FLAT_MAX = 200_000  # bench/index/index_bench.py: exact search stays < ~10 ms/query below this size
HNSW_M = 32
TUNE_SAMPLE = 1_000
RECALL_K = 10
USE_OPQ = False  # rotate before PQ (see module docstring); the benchmark measures both


def estimated_bytes_per_vector(kind: str, dim: int) -> float:
    """Resident bytes per vector (FAISS wiki formulas; ivfpq counts codes + id, refine is mmapped)."""
    if kind == "hnsw":
        return 4 * dim + 2 * HNSW_M * 4 * 1.05  # + upper levels
    if kind == "ivfpq":
        return _pq_m(dim) + 8
    return 4 * dim + (8 if kind == "ivf" else 0)


def choose_kind(n: int, dim: int, memory_budget_bytes: int | None = None) -> str:
    """FAISS guideline, adapted to bench/index/index_bench.py's timings: exact below ~200k, HNSW above, PQ if memory forces."""

    def fits(kind: str) -> bool:
        return memory_budget_bytes is None or estimated_bytes_per_vector(kind, dim) * n <= memory_budget_bytes

    if n <= AUTO_FLAT_MAX and fits("flat"):
        return "flat"
    if fits("hnsw"):
        return "hnsw"
    if fits("ivf"):
        return "ivf"
    if fits("ivfpq"):
        return "ivfpq"
    raise IndexBuildError(
        f"{n} vectors of dim {dim} do not fit in a memory budget of {memory_budget_bytes} bytes "
        f"even as IVF-PQ ({estimated_bytes_per_vector('ivfpq', dim):.0f} bytes/vector)"
    )


def ivf_lists(n: int) -> int:
    """IVF lists for n vectors (FAISS's and Milvus' IVF indexes alike)."""
    # FAISS wiki: K = 4·√N … 16·√N lists; k-means wants >= 39 training points per centroid
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def _pq_m(dim: int) -> int:
    # ~8 dimensions per sub-quantizer (PQ48 at d = 384, bench/index/index_bench.py); m must divide d
    m = max(1, dim // 8)
    while dim % m:
        m -= 1
    return m


def _pq_nbits(n: int) -> int:
    return int(max(1, min(8, math.floor(math.log2(max(2, n // 39))))))


def factory_string(kind: str, n: int, dim: int) -> str:
    if kind == "flat":
        return "Flat"
    if kind == "hnsw":
        return f"HNSW{HNSW_M},Flat"
    nlist = ivf_lists(n)
    if kind == "ivf":
        return f"IVF{nlist},Flat"
    if kind == "ivfpq":
        m, nbits = _pq_m(dim), _pq_nbits(n)
        opq = f"OPQ{m}_{dim}," if USE_OPQ and n >= 39 * 256 else ""  # OPQ trains a 256-centroid PQ
        return f"{opq}IVF{nlist},PQ{m}x{nbits}np,RFlat"  # np: skip slow polysemous training
    raise IndexBuildError(f"unknown index kind {kind!r} (expected one of {', '.join(KINDS)})")


def build_index(
    vectors: np.ndarray,
    *,
    metric: IndexMetric = "ip",
    kind: IndexKind | str = "auto",
    tune_queries: np.ndarray | None = None,
    target_recall: float = TARGET_RECALL,
    memory_budget_bytes: int | None = None,
    seed: int = 0,
) -> VectorIndex:
    """Build an index over `vectors` (rows = positions) and tune it to `target_recall` recall@10."""
    x = vectors if isinstance(vectors, np.memmap) else as_matrix(vectors, "vectors")  # (n, d)
    if x.ndim != 2 or x.dtype != np.float32:
        raise IndexBuildError(f"vectors must be a float32 (n, dim) matrix, got {x.dtype} {x.shape}")
    check_finite(x)
    n, d = x.shape
    if n == 0:
        raise IndexBuildError("cannot build an index over 0 vectors")
    if kind not in KINDS:
        raise IndexBuildError(f"unknown index kind {kind!r} (expected one of {', '.join(KINDS)})")
    if not 0.0 < target_recall <= 1.0:
        raise IndexBuildError(f"target_recall must be in (0, 1], got {target_recall}")
    t0 = time.perf_counter()
    chosen = choose_kind(n, d, memory_budget_bytes) if kind == "auto" else str(kind)
    factory = factory_string(chosen, n, d)
    index = faiss.index_factory(d, factory, faiss_metric(metric))
    if not index.is_trained:
        rng = np.random.default_rng(seed)
        n_train = min(n, 256 * ivf_lists(n), 200_000)
        sample = x[np.sort(rng.choice(n, n_train, replace=False))] if n_train < n else x
        logger.info("training %s on %d vectors", factory, len(sample))
        index.train(sample)
    _reserve(index, n)
    for _, block in chunks(x):  # a memory-mapped x is paged in chunk by chunk, never copied whole
        index.add(block)
    if chosen == "ivf":
        faiss.extract_index_ivf(index).make_direct_map()  # exact_vectors() for filtered searches
    info = IndexInfo(factory=factory, kind=chosen, metric=metric, ntotal=n, dim=d, bytes_per_vector=0.0)
    vi = VectorIndex(index, info)
    if chosen != "flat":
        _tune(vi, x, tune_queries, target_recall, seed)
    info.build_seconds = round(time.perf_counter() - t0, 3)
    info.bytes_per_vector, info.resident_bytes_per_vector = _sizes(index, n)
    logger.info(
        "built %s (%s, %d vectors): params %s, recall@10 %s, %.1f s",
        factory,
        metric,
        n,
        info.params,
        info.recall_at_10,
        info.build_seconds,
    )
    return vi


def _reserve(index: Any, n: int) -> None:
    """Size flat storage for n vectors before the chunked adds: growing a std::vector chunk by chunk
    reallocates by doubling, and old + new buffer together would be up to twice the vectors."""
    flat = faiss.downcast_index(index.storage) if isinstance(index, faiss.IndexHNSW) else index
    if isinstance(flat, faiss.IndexFlatCodes):
        flat.codes.resize(n * flat.code_size)
        flat.codes.resize(0)  # std::vector keeps its capacity when it shrinks


def _sizes(index: Any, n: int) -> tuple[float, float | None]:
    # written to a scratch file and measured there: serialize_index would hold a second, in-memory copy
    total = _serialized_bytes(index) / n
    if isinstance(index, faiss.IndexRefine):
        base = _serialized_bytes(index.base_index) / n
        return round(total, 1), round(base, 1)
    return round(total, 1), None


def _serialized_bytes(index: Any) -> int:
    with tempfile.TemporaryDirectory(prefix="index-size-") as folder:
        path = os.path.join(folder, "index.faiss")
        faiss.write_index(index, path)
        return os.path.getsize(path)


# -- tuning -----------------------------------------------------------------------------------------
def _tune_grid(vi: VectorIndex) -> list[dict[str, int]]:
    """Candidate search parameters, cheapest first."""
    if vi.info.kind == "hnsw":
        return [{"efSearch": ef} for ef in (16, 32, 64, 128, 256, 512, 1024, 2048)]
    nlist = faiss.extract_index_ivf(vi.index).nlist
    probes = sorted({min(nlist, 2**i) for i in range(int(math.log2(nlist)) + 2)})
    if vi.info.kind == "ivf":
        return [{"nprobe": p} for p in probes]
    n, d = vi.ntotal, vi.dim
    # past half the lists a PQ scan costs about as much as exact search: not worth tuning into
    probes = [p for p in probes if p <= max(1, nlist // 2)]
    combos = [{"nprobe": p, "k_factor": kf} for p in probes for kf in (2, 4, 8, 16, 32)]
    # cost model: PQ codes scanned (m bytes each) + full vectors read for re-ranking
    return sorted(combos, key=lambda c: c["nprobe"] * n / nlist * _pq_m(d) + c["k_factor"] * RECALL_K * 4 * d)


def _tune(vi: VectorIndex, x: np.ndarray, tune_queries: np.ndarray | None, target: float, seed: int) -> None:
    def search(q: np.ndarray, n: int, params: dict[str, int]) -> list[np.ndarray]:
        vi.set_params(params)
        return list(vi.index.search(q, min(n, vi.index.ntotal))[1])  # (nq, n) positions

    tuned = tune_to_recall(
        x,
        tune_queries,
        _tune_grid(vi),
        search,
        metric=vi.info.metric,
        target=target,
        seed=seed,
        label=vi.info.factory,
    )
    if tuned is None:
        return
    params, recall, n_queries = tuned
    vi.set_params(params)
    vi.info.recall_at_10 = recall
    vi.info.tune_queries = n_queries


def tune_to_recall(
    x: np.ndarray,
    queries: np.ndarray | None,
    grid: list[dict[str, int]],
    search: Callable[[np.ndarray, int, dict[str, int]], Sequence[np.ndarray]],
    *,
    metric: IndexMetric,
    target: float,
    seed: int,
    label: str,
) -> tuple[dict[str, int], float, int] | None:
    """The first search params of `grid` (cheapest first) whose recall@10 against exact search over `x`
    reaches `target`, else the best of them: (params, recall, number of tuning queries). `search(q, n,
    params)` answers each query's top-n positions. Real `queries` (sampled down to TUNE_SAMPLE) when
    given, else a sample of corpus vectors, each one's own row dropped from both result lists. None when
    there is nothing to measure (no query, or no neighbour besides a query's own row)."""
    rng = np.random.default_rng(seed)
    self_ids: np.ndarray | None = None
    if queries is None:
        self_ids = np.sort(rng.choice(len(x), min(TUNE_SAMPLE, len(x)), replace=False))
        q = x[self_ids]
    else:
        q = as_matrix(queries, "tune_queries", x.shape[1])
        if len(q) > TUNE_SAMPLE:
            q = q[np.sort(rng.choice(len(q), TUNE_SAMPLE, replace=False))]
    extra = 1 if self_ids is not None else 0
    k = min(RECALL_K, len(x) - extra)
    if k < 1 or len(q) == 0:
        return None
    truth_pos = exact_top_k(x, q, k + extra, metric)  # (nq, k+extra), chunk by chunk: no second copy of x
    truth = [drop_self(row, self_ids, i, k) for i, row in enumerate(truth_pos)]
    best: tuple[float, dict[str, int]] | None = None
    for params in grid:
        found = search(q, k + extra, params)
        rec = recall_at(truth, [drop_self(row, self_ids, i, k) for i, row in enumerate(found)])
        if best is None or rec > best[0]:
            best = (rec, params)
        if rec >= target:
            break
    assert best is not None
    if best[0] < target:
        logger.warning(
            "%s reached recall@10 %.3f < target %.3f (best params %s)", label, best[0], target, best[1]
        )
    return dict(best[1]), round(best[0], 4), len(q)


def drop_self(row: np.ndarray, self_ids: np.ndarray | None, i: int, k: int) -> np.ndarray:
    row = row[row >= 0]
    if self_ids is not None:
        row = row[row != self_ids[i]]
    return row[:k]


def recall_at(truth: list[np.ndarray], found: list[np.ndarray]) -> float:
    """Mean |found ∩ truth| / |truth| over queries (recall@k of an ANN index vs exact search)."""
    hits = [len(np.intersect1d(t, f)) / max(1, len(t)) for t, f in zip(truth, found, strict=True)]
    return float(np.mean(hits)) if hits else 1.0
