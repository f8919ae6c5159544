"""FAISS vector index: build through factory strings, auto-choose, tune to a recall target, search.

Contract module: the API imports it, so it imports nothing from training except `training.errors`.

Index kinds (FAISS wiki, "Guidelines to choose an index"; measured trade-offs in
docs/performance.md, B4-B6):

- ``flat``  : ``Flat``, exact. 4·d bytes/vector. Default below ~200k vectors.
- ``hnsw``  : ``HNSW32,Flat``; knob efSearch. ~4·d + 2·32·4 bytes/vector, no training.
- ``ivf``   : ``IVF{nlist},Flat`` with nlist ≈ 4·√N; knob nprobe.
- ``ivfpq`` : ``IVF{nlist},PQ{m},RFlat``; knobs nprobe and k_factor. PQ alone caps at
  R@10 ≈ 0.65 on text embeddings (performance.md B4), so the top k·k_factor PQ candidates are
  re-ranked exactly against the full vectors kept in the RFlat stage. Loaded with ``mmap=True`` those
  full vectors stay in the file's page cache, so resident memory is the PQ codes plus touched pages.
  OPQ in front (``USE_OPQ``) is off by default: its training took 35 s for 10k 16-d vectors on the
  2-core box and the exact re-ranking already recovers what OPQ would add to the PQ ranking.

Metric: ``ip`` (cosine on normalised vectors, InfoNCE) or ``l2`` (AnInfoNCE on √Λ-scaled vectors). The
score returned is the model's similarity: the inner product, or −½·squared L2 distance (the AnInfoNCE
learned similarity, see training/encoder.py).

Process-global knob: ``faiss.cvar.distance_compute_blas_threshold``. FAISS only switches exact search
from a per-query SIMD scan to one sgemm when nq·d >= 128000 (334 queries at d = 384), so batches of
8-256 re-read the whole index per query. `set_flat_batch_threshold` lowers it to 20·d (batches of >= 20
queries use sgemm: 7x faster for batches of 64, performance.md B4); single queries are unaffected. It is
process-global, so it is set once on build/load and never raised again.

Threads: searches of fewer than SMALL_BATCH queries (the ones below that sgemm threshold) run FAISS on
one OpenMP thread. A single query's scan gained nothing from the second core here and lost much when
the query encoder's own threads (torch or onnxruntime, spinning after the encode) held the cores:
105k-vector Flat, encode + search of one query 39.9 ms with FAISS's 2 threads, 11.9 ms with one.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np
from pydantic import BaseModel

from training.errors import IndexBuildError

logger = logging.getLogger(__name__)

IndexMetric = Literal["ip", "l2"]
IndexKind = Literal["auto", "flat", "hnsw", "ivf", "ivfpq"]
KINDS = ("auto", "flat", "hnsw", "ivf", "ivfpq")
AUTO_FLAT_MAX = 200_000  # performance.md C1: exact search stays < ~10 ms/query below this size
HNSW_M = 32
EXACT_FILTER_MAX = 20_000  # filtered searches over at most this many rows are answered exactly
TUNE_SAMPLE = 1_000
RECALL_K = 10
USE_OPQ = False  # rotate before PQ (see module docstring); the benchmark measures both


class IndexInfo(BaseModel):
    """What was built and how it is searched; stored in the bundle manifest."""

    factory: str
    kind: str
    metric: IndexMetric
    params: dict[str, int] = {}
    recall_at_10: float | None = None  # vs exact search on the tuning queries; None = exact index
    tune_queries: int = 0
    ntotal: int
    dim: int
    bytes_per_vector: float  # serialised size / ntotal
    resident_bytes_per_vector: float | None = None  # ivfpq loaded with mmap: codes only
    build_seconds: float = 0.0


SMALL_BATCH = 20  # queries; = the 20·d sgemm threshold below


def set_flat_batch_threshold(dim: int) -> None:
    """Let batches of >= 20 queries use BLAS for exact search (process-global; see module docstring)."""
    target = 20 * dim
    if faiss.cvar.distance_compute_blas_threshold > target:
        faiss.cvar.distance_compute_blas_threshold = target


def _faiss_metric(metric: str) -> int:
    if metric == "ip":
        return faiss.METRIC_INNER_PRODUCT
    if metric == "l2":
        return faiss.METRIC_L2
    raise IndexBuildError(f"unknown index metric {metric!r} (expected 'ip' or 'l2')")


def _as_matrix(x: np.ndarray, name: str, dim: int | None = None) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise IndexBuildError(f"{name} must be a 2-d array (n, dim), got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise IndexBuildError(f"{name} have dimension {x.shape[1]}, the index has {dim}")
    if not np.isfinite(x).all():
        raise IndexBuildError(f"{name} contain NaN or infinite values")
    return x


class VectorIndex:
    """A FAISS index whose rows are positions 0..ntotal-1, with the search knobs already applied."""

    def __init__(self, index: faiss.Index, info: IndexInfo):
        self.index = index
        self.info = info
        self._apply_params(info.params)
        set_flat_batch_threshold(index.d)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    # -- search -------------------------------------------------------------------------------------
    def search(
        self, queries: np.ndarray, k: int, *, allowed: np.ndarray | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-k per query: (positions int64, scores float32), best first, never a −1 position."""
        q = _as_matrix(queries, "queries", self.dim)  # (nq, d)
        if k < 1:
            raise IndexBuildError(f"k must be >= 1, got {k}")
        if allowed is not None:
            return self._search_allowed(q, k, np.asarray(allowed, dtype=np.int64))
        kk = min(k, self.ntotal)
        if kk == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(q))]
        dist, pos = self._faiss_search(q, kk)  # (nq, kk) each
        return [self._row(dist[i], pos[i]) for i in range(len(q))]

    def _faiss_search(self, q: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        if len(q) >= SMALL_BATCH:
            return self.index.search(q, k, params=params)
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # this thread's setting only (OpenMP per-thread ICV)
        try:
            return self.index.search(q, k, params=params)
        finally:
            faiss.omp_set_num_threads(threads)

    def _row(self, dist: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keep = pos >= 0  # FAISS pads with −1 when it finds fewer than k
        scores = dist[keep].astype(np.float32)
        if self.info.metric == "l2":
            scores = -0.5 * scores
        return pos[keep].astype(np.int64), scores

    def _search_allowed(
        self, q: np.ndarray, k: int, allowed: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        allowed = np.unique(allowed)
        if len(allowed) and (allowed[0] < 0 or allowed[-1] >= self.ntotal):
            raise IndexBuildError(f"allowed positions must lie in [0, {self.ntotal})")
        kk = min(k, len(allowed))
        if kk == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(q))]
        if self.info.kind != "flat" and len(allowed) <= EXACT_FILTER_MAX:
            return self._exact_subset(q, kk, allowed)
        sel = faiss.IDSelectorBatch(allowed)
        params = self._search_params(sel)
        dist, pos = self._faiss_search(q, kk, params=params)  # (nq, kk) each
        out = [self._row(dist[i], pos[i]) for i in range(len(q))]
        short = [i for i, (p, _) in enumerate(out) if len(p) < kk]
        if short:  # an ANN graph/list walk can starve under a selective filter: answer those exactly
            exact = self._exact_subset(q[short], kk, allowed)
            for i, res in zip(short, exact, strict=True):
                out[i] = res
        return out

    def _exact_subset(
        self, q: np.ndarray, k: int, allowed: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        vecs = self.exact_vectors(allowed)  # (na, d)
        sub = faiss.IndexFlat(self.dim, _faiss_metric(self.info.metric))
        sub.add(vecs)
        dist, pos = sub.search(q, k)  # (nq, k) positions into `allowed`
        return [self._row(dist[i], np.where(pos[i] >= 0, allowed[pos[i]], -1)) for i in range(len(q))]

    def exact_vectors(self, positions: np.ndarray) -> np.ndarray:
        """The stored full-precision vectors of `positions` (for exact re-ranking and filters)."""
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        index = self.index
        if isinstance(index, faiss.IndexRefine):
            index = faiss.downcast_index(index.refine_index)
        return np.ascontiguousarray(index.reconstruct_batch(positions), dtype=np.float32)

    def _search_params(self, sel: Any) -> Any:
        p = self.info.params
        if self.info.kind == "flat":
            return faiss.SearchParameters(sel=sel)
        if self.info.kind == "hnsw":
            return faiss.SearchParametersHNSW(sel=sel, efSearch=p.get("efSearch", 64))
        ivf = faiss.SearchParametersIVF(sel=sel, nprobe=p.get("nprobe", 1))
        if self.info.kind == "ivf":
            return ivf
        base: Any = ivf
        if isinstance(faiss.downcast_index(self.index.base_index), faiss.IndexPreTransform):  # OPQ in front
            base = faiss.SearchParametersPreTransform(index_params=ivf)
        params = faiss.IndexRefineSearchParameters(
            k_factor=float(p.get("k_factor", 4)), base_index_params=base
        )
        params.sel = sel
        params._refs = (sel, ivf, base)  # SWIG does not own nested params: keep them alive
        return params

    def _apply_params(self, params: dict[str, int]) -> None:
        if not params:
            return
        ps = faiss.ParameterSpace()
        for name, value in params.items():
            if name == "k_factor" and isinstance(self.index, faiss.IndexRefine):
                self.index.k_factor = float(value)
            else:
                ps.set_index_parameter(self.index, name, value)

    def set_params(self, params: dict[str, int]) -> None:
        self.info.params = dict(params)
        self._apply_params(params)

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the index atomically (temp file in the same folder + os.replace)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            faiss.write_index(self.index, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path, info: IndexInfo | None = None, *, mmap: bool = False) -> VectorIndex:
        """Read an index; `info` (from the manifest) restores kind, metric and search parameters."""
        path = Path(path)
        try:
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mmap else 0)
        except RuntimeError as exc:
            raise IndexBuildError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0]})") from exc
        # read_index already returns the concrete class; a second downcast_index would make a
        # non-owning wrapper and the index would be freed with the first one
        if info is None:
            metric: IndexMetric = "l2" if index.metric_type == faiss.METRIC_L2 else "ip"
            info = IndexInfo(
                factory="?",
                kind=_kind_of(index),
                metric=metric,
                ntotal=index.ntotal,
                dim=index.d,
                bytes_per_vector=path.stat().st_size / max(1, index.ntotal),
            )
        return cls(index, info.model_copy(deep=True))


def _kind_of(index: Any) -> str:
    if isinstance(index, faiss.IndexRefine):
        return "ivfpq"
    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(index, faiss.IndexIVF):
        return "ivf"
    return "flat"


# -- building ---------------------------------------------------------------------------------------
def estimated_bytes_per_vector(kind: str, dim: int) -> float:
    """Resident bytes per vector (FAISS wiki formulas; ivfpq counts codes + id, refine is mmapped)."""
    if kind == "hnsw":
        return 4 * dim + 2 * HNSW_M * 4 * 1.05  # + upper levels
    if kind == "ivfpq":
        return _pq_m(dim) + 8
    return 4 * dim + (8 if kind == "ivf" else 0)


def choose_kind(n: int, dim: int, memory_budget_bytes: int | None = None) -> str:
    """FAISS guideline, adapted to performance.md C1: exact below ~200k, HNSW above, PQ if memory forces."""

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


def _nlist(n: int) -> int:
    # FAISS wiki: K = 4·√N … 16·√N lists; k-means wants >= 39 training points per centroid
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def _pq_m(dim: int) -> int:
    # ~8 dimensions per sub-quantizer (PQ48 at d = 384, performance.md B4); m must divide d
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
    nlist = _nlist(n)
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
    target_recall: float = 0.95,
    memory_budget_bytes: int | None = None,
    seed: int = 0,
) -> VectorIndex:
    """Build an index over `vectors` (rows = positions) and tune it to `target_recall` recall@10."""
    x = _as_matrix(vectors, "vectors")  # (n, d)
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
    index = faiss.index_factory(d, factory, _faiss_metric(metric))
    if not index.is_trained:
        rng = np.random.default_rng(seed)
        n_train = min(n, 256 * _nlist(n), 200_000)
        sample = x[np.sort(rng.choice(n, n_train, replace=False))] if n_train < n else x
        logger.info("training %s on %d vectors", factory, len(sample))
        index.train(sample)
    index.add(x)
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


def _sizes(index: Any, n: int) -> tuple[float, float | None]:
    total = len(faiss.serialize_index(index)) / n
    if isinstance(index, faiss.IndexRefine):
        base = len(faiss.serialize_index(index.base_index)) / n
        return round(total, 1), round(base, 1)
    return round(total, 1), None


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
    rng = np.random.default_rng(seed)
    self_ids: np.ndarray | None = None
    if tune_queries is None:
        # no real queries: corpus vectors as queries, each one's own row excluded from both result lists
        self_ids = np.sort(rng.choice(len(x), min(TUNE_SAMPLE, len(x)), replace=False))
        q = x[self_ids]
    else:
        q = _as_matrix(tune_queries, "tune_queries", vi.dim)
        if len(q) > TUNE_SAMPLE:
            q = q[np.sort(rng.choice(len(q), TUNE_SAMPLE, replace=False))]
    k = min(RECALL_K, vi.ntotal - (1 if self_ids is not None else 0))
    if k < 1 or len(q) == 0:
        return
    exact = faiss.IndexFlat(vi.dim, _faiss_metric(vi.info.metric))
    exact.add(x)
    truth = _top(exact, q, k, self_ids)
    best: tuple[float, dict[str, int]] | None = None
    for params in _tune_grid(vi):
        vi.set_params(params)
        rec = recall_at(truth, _top(vi.index, q, k, self_ids))
        if best is None or rec > best[0]:
            best = (rec, params)
        if rec >= target:
            break
    assert best is not None
    if best[0] < target:
        logger.warning(
            "%s reached recall@10 %.3f < target %.3f (best params %s)",
            vi.info.factory,
            best[0],
            target,
            best[1],
        )
    vi.set_params(best[1])
    vi.info.recall_at_10 = round(best[0], 4)
    vi.info.tune_queries = len(q)


def _top(index: Any, q: np.ndarray, k: int, self_ids: np.ndarray | None) -> list[np.ndarray]:
    extra = 1 if self_ids is not None else 0
    _, pos = index.search(q, min(k + extra, index.ntotal))  # (nq, k+extra)
    rows = []
    for i, row in enumerate(pos):
        row = row[row >= 0]
        if self_ids is not None:
            row = row[row != self_ids[i]]
        rows.append(row[:k])
    return rows


def recall_at(truth: list[np.ndarray], found: list[np.ndarray]) -> float:
    """Mean |found ∩ truth| / |truth| over queries (recall@k of an ANN index vs exact search)."""
    hits = [len(np.intersect1d(t, f)) / max(1, len(t)) for t, f in zip(truth, found, strict=True)]
    return float(np.mean(hits)) if hits else 1.0
