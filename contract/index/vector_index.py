"""FAISS vector index: the loaded, searchable index of a bundle (build and tuning: training/export/index_factory.py).

Contract module: the API imports it, so it imports nothing from training except `contract.errors`.

Metric: ``ip`` (cosine on normalised vectors, InfoNCE) or ``l2`` (AnInfoNCE on √Λ-scaled vectors). The
score returned is the model's similarity: the inner product, or −½·squared L2 distance (the AnInfoNCE
learned similarity; the one conversion is contract.encoding.similarity.index_scores).

Process-global knob: ``faiss.cvar.distance_compute_blas_threshold``. FAISS only switches exact search
from a per-query SIMD scan to one sgemm when nq·d >= 128000 (334 queries at d = 384), so batches of
8-256 re-read the whole index per query. `set_flat_batch_threshold` lowers it to SGEMM_FROM·d: batches of
>= 8 queries use sgemm, which costs 0.93/0.72 of the scan per query at 8, 0.59/0.40 at 16 (the
micro-batches of 32 clients) on 15k/100k vectors, and loses below 8 at every size tried
(bench/index/flat_batch_threshold.py, bench/results/flat_batch_threshold.txt; 7x for batches of 64,
bench/index/index_bench.py); single queries are unaffected. It is process-global, so it is set once on
build/load and never raised again.

Threads: a search runs FAISS on one OpenMP thread unless it scores at least PARALLEL_FROM query-vector
pairs. FAISS parallelises over its OpenMP team (its bundled OpenBLAS runs the batch's sgemm on that team
too), and when the search returns, libgomp's idle worker spins for the next parallel region instead of
sleeping: milliseconds of a core after every search, which in a server is the core the event loop and the
other worker's encoder need. One server process (int8, default threads, debpkgs, 32 clients) spent 0.90-1.09
ms of native-thread CPU a request with a team of two for batches from 20 queries, 0.78-0.79 ms with one
thread below 2M pairs, and served 725-760 -> 780-802 req/s, p99 66 -> 59-61 ms (bench/serving/thread_cpu.py
before and after, alternated: bench/results/thread_cpu_faiss_threads_debpkgs.txt; gdb showed the idle
worker in OpenBLAS's threaded sgemm). Per search, with a 40 ms gap after it as a served batch has, a team of
two lost on wall time and CPU at 1.1k and 15k vectors for 8-32 queries (1.1k, 32 queries: 1.07 -> 11.8 ms
of wall, 1.1 -> 19.5 ms of CPU); at 100k it saved 7-16 ms of wall for 13-28 ms more CPU; PARALLEL_FROM
(100k x 20) is about there (bench/index/flat_search_threads.py, bench/results/flat_search_threads.txt). On
busy cores the second thread also waits to be scheduled at each barrier: 20-90x the wall time in the same
bench. Earlier, with the query encoder's own threads spinning: 105k-vector Flat, encode + search of one
query 39.9 ms with FAISS's 2 threads, 11.9 ms with one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from pydantic import BaseModel

from contract.atomic import atomic_path
from contract.encoding.similarity import IndexMetric, index_scores
from contract.errors import IndexBuildError, InfonceSearchError, InvalidQuery
from contract.index.half_scan import HalfScan

logger = logging.getLogger(__name__)

# One query's answer from any index (FAISS, Milvus, the overlay, BM25, fusion): positions int64 and
# scores float32, best first. A batch of queries gives one Ranking each.
Ranking = tuple[np.ndarray, np.ndarray]
Rankings = list[Ranking]
EXACT_FILTER_MAX = 20_000  # filtered searches over at most this many rows are answered exactly


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


PARALLEL_FROM = (
    2_000_000  # query x vector pairs from which a search gets FAISS's whole OpenMP team (module docstring)
)
SGEMM_FROM = 8  # queries from which exact search takes FAISS's sgemm (module docstring)


def set_flat_batch_threshold(dim: int) -> None:
    """Let batches of >= SGEMM_FROM queries use BLAS for exact search (process-global; module docstring)."""
    target = SGEMM_FROM * dim
    if faiss.cvar.distance_compute_blas_threshold > target:
        faiss.cvar.distance_compute_blas_threshold = target


def faiss_metric(index_metric: str) -> int:
    if index_metric == "ip":
        return faiss.METRIC_INNER_PRODUCT
    if index_metric == "l2":
        return faiss.METRIC_L2
    raise IndexBuildError(f"unknown index metric {index_metric!r} (expected 'ip' or 'l2')")


def metric_of(index: faiss.Index) -> IndexMetric:
    """The metric a FAISS index was built with, in the manifest's words."""
    return "l2" if index.metric_type == faiss.METRIC_L2 else "ip"


def as_matrix(
    x: np.ndarray, name: str, dim: int | None = None, *, error: type[InfonceSearchError] = IndexBuildError
) -> np.ndarray:
    """float32, C-contiguous (n, dim), finite; `error` names whose fault it is (InvalidQuery: a search's)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise error(f"{name} must be a 2-d array (n, dim), got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise error(f"{name} have dimension {x.shape[1]}, the index has {dim}")
    if not np.isfinite(x).all():
        raise error(f"{name} contain NaN or infinite values")
    return x


class VectorIndex:
    """A FAISS index whose rows are positions 0..ntotal-1, with the search knobs already applied."""

    def __init__(self, index: faiss.Index, info: IndexInfo):
        self.index = index
        self.info = info
        self.half: HalfScan | None = None  # serving's fp16 copy for few-query scans (keep_half_copy)
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
        self,
        queries: np.ndarray,
        k: int,
        *,
        allowed: np.ndarray | None = None,
        excluded: np.ndarray | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-k per query: (positions int64, scores float32), best first, never a −1 position.

        `excluded`: positions never returned (deleted documents, contract/mutations/overlay.py); k stays full."""
        q = as_matrix(queries, "queries", self.dim, error=InvalidQuery)  # (nq, d)
        if k < 1:
            raise InvalidQuery(f"k must be >= 1, got {k}")
        if excluded is not None and len(excluded):
            if allowed is not None:
                allowed = np.setdiff1d(np.asarray(allowed, dtype=np.int64), excluded)
            else:
                return self._search_excluding(q, k, np.unique(np.asarray(excluded, dtype=np.int64)))
        if allowed is not None:
            return self._search_allowed(q, k, np.asarray(allowed, dtype=np.int64))
        kk = min(k, self.ntotal)
        if kk == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(q))]
        dist, pos = self._faiss_search(q, kk)  # (nq, kk) each
        return [self._row(dist[i], pos[i]) for i in range(len(q))]

    def _faiss_search(
        self, q: np.ndarray, k: int, params: Any = None, available: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Under SGEMM_FROM queries through the fp16 copy when one is kept (exact all the same), else on the
        index; `available`: the vectors `params`' id selector lets through (default: all)."""
        if self.half is not None and len(q) < SGEMM_FROM:
            return self.half.search(q, k, faiss_search, params=params, available=available)
        return faiss_search(self.index, q, k, params)

    def _row(self, dist: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return hits_row(dist, pos, self.info.metric)

    def _search_allowed(
        self, q: np.ndarray, k: int, allowed: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        allowed = np.unique(allowed)
        if len(allowed) and (allowed[0] < 0 or allowed[-1] >= self.ntotal):
            raise InvalidQuery(f"allowed positions must lie in [0, {self.ntotal})")
        kk = min(k, len(allowed))
        if kk == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(q))]
        if self.info.kind != "flat" and len(allowed) <= EXACT_FILTER_MAX:
            return self._exact_subset(q, kk, allowed)
        sel = faiss.IDSelectorBatch(allowed)
        params = self._search_params(sel)
        dist, pos = self._faiss_search(q, kk, params, available=len(allowed))  # (nq, kk) each
        out = [self._row(dist[i], pos[i]) for i in range(len(q))]
        short = [i for i, (p, _) in enumerate(out) if len(p) < kk]
        if short:  # an ANN graph/list walk can starve under a selective filter: answer those exactly
            exact = self._exact_subset(q[short], kk, allowed)
            for i, res in zip(short, exact, strict=True):
                out[i] = res
        return out

    def _search_excluding(
        self, q: np.ndarray, k: int, excluded: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """FAISS's own id selector skips the excluded rows, so a query still gets k results."""
        kk = min(k, self.ntotal - len(excluded))
        if kk <= 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(q))]
        inner = faiss.IDSelectorBatch(excluded)
        sel = faiss.IDSelectorNot(inner)
        # `excluded` is sorted and unique (search): the positions it takes out of the index
        live = self.ntotal - int(np.searchsorted(excluded, self.ntotal) - np.searchsorted(excluded, 0))
        dist, pos = self._faiss_search(q, kk, self._search_params(sel), available=live)  # (nq, kk) each
        out = [self._row(dist[i], pos[i]) for i in range(len(q))]
        short = [i for i, (p, _) in enumerate(out) if len(p) < kk]
        if short:  # an ANN walk can starve under the selector: over-fetch without it and drop the excluded
            kf = min(self.ntotal, kk + len(excluded))
            dist, pos = self._faiss_search(q[short], kf)
            for j, i in enumerate(short):
                p, s = self._row(dist[j], pos[j])
                keep = ~np.isin(p, excluded)
                out[i] = (p[keep][:kk], s[keep][:kk])
        del inner  # referenced by `sel` on the C++ side until the searches above are done
        return out

    def _exact_subset(
        self, q: np.ndarray, k: int, allowed: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        vecs = self.exact_vectors(allowed)  # (na, d)
        sub = faiss.IndexFlat(self.dim, faiss_metric(self.info.metric))
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
        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))
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
            info = IndexInfo(
                factory="?",
                kind=_kind_of(index),
                metric=metric_of(index),
                ntotal=index.ntotal,
                dim=index.d,
                bytes_per_vector=path.stat().st_size / max(1, index.ntotal),
            )
        return cls(index, info.model_copy(deep=True))

    def keep_half_copy(self) -> HalfScan | None:
        """Keep an fp16 copy for searches of under SGEMM_FROM queries, where it pays (contract/index/half_scan.py:
        a flat inner-product index of HALF_SCAN_FROM_BYTES or more); answers stay exact. None: not kept."""
        self.half = HalfScan.build(self.index)
        return self.half


def _kind_of(index: Any) -> str:
    if isinstance(index, faiss.IndexRefine):
        return "ivfpq"
    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(index, faiss.IndexIVF):
        return "ivf"
    return "flat"


def faiss_search(index: Any, q: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """`index.search`, on one OpenMP thread below PARALLEL_FROM query-vector pairs (module docstring); the
    overlay's delta index searches through here too, so a small delta runs on one thread like the main
    index (switching the team size between the two cost 10 ms per query under load,
    bench/serving/mutation_bench.py)."""
    if len(q) * index.ntotal >= PARALLEL_FROM:
        return index.search(q, k, params=params)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # this thread's setting only (OpenMP per-thread ICV)
    try:
        return index.search(q, k, params=params)
    finally:
        faiss.omp_set_num_threads(threads)


def hits_row(dist: np.ndarray, pos: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """One query's (positions, scores) from FAISS's row, without the −1 padding FAISS adds when it finds
    fewer than k; scores on the similarity's scale (contract.encoding.similarity.index_scores)."""
    keep = pos >= 0
    return pos[keep].astype(np.int64), index_scores(dist[keep].astype(np.float32), metric)
