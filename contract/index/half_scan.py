"""A half-precision copy of a flat inner-product index that answers a few queries exactly, reading half the bytes.

Why: a served query's flat scan runs right after the query encoder, whose int8 layer weights (about 12 MB
for MiniLM) have most likely pushed the index's vectors out of the CPU cache, so the scan streams them from
memory. One
query's exact search right after an int8 encode: scifact's 5,183 × 384 vectors 501-531 µs in fp32, 300-370
as this module's fp16 scan with its exact re-scoring; after a 64 MB sweep, 15k-200k clustered vectors 0.48-
0.55 of the fp32 time (200k: 16.8 -> 8.2 ms). Below HALF_SCAN_FROM_BYTES the re-scoring costs more than the
halved reads save (manpages' 2,500 vectors, 3.7 MB: 1.24-1.34x; bench/index/half_scan.py,
bench/results/half_scan.txt).

How it stays exact: FAISS scans the fp16 copy (``SQfp16``) for k + margin candidates, their scores are
recomputed from the fp32 vectors, and the top k of those are returned only when no vector outside the
candidates can beat the k-th: each fp16 score is within ε of the true inner product, with
ε = ‖q‖·M·(2⁻¹⁰ + d·2⁻²²) + 2⁻²⁴·‖q‖₁, M the largest vector norm (one fp16 rounding, at most one unit in the
last place of 2⁻¹⁰ relative, or 2⁻²⁴ absolute below fp16's normal range; plus float32 summation error
d·2⁻²⁴ relative for each of the two sums, doubled for headroom). So a vector left out scores at most the
last candidate's fp16 score + ε, and where the k-th re-scored candidate beats that, the answer is the exact
top k. A query without that certificate is searched again on the fp32 index.

Memory: the copy holds 2·d bytes a vector beside the fp32 index's 4·d, in every worker (serving reads the
index into memory: app/live/hot_swap.py), so a server keeps it only with SEARCH_INDEX_HALF_SCAN on (the
default) and GET /bundles shows its size.

A metadata filter's allowed documents and the deleted ones (the mutation overlay's tombstones) reach the
fp16 scan and any fallback as the same id selector. Only for few queries at once: batches of SGEMM_FROM or
more take FAISS's sgemm over the fp32 vectors, which reads them once for the whole batch
(contract/index/vector_index.py).
"""

from __future__ import annotations

import logging
from typing import Any

import faiss
import numpy as np

logger = logging.getLogger(__name__)

HALF_SCAN_FROM_BYTES = 4 << 20  # fp32 vectors from which the copy is kept (bench/results/half_scan.txt)
FP16_MAX = 65504.0
_REL = 2.0**-10  # fp16 rounding, relative, with a factor 2 of headroom (round-to-nearest gives 2⁻¹¹)
_ABS = 2.0**-24  # fp16 rounding below its normal range (subnormal spacing 2⁻²⁴, headroom included)


def margin(k: int) -> int:
    """Candidates fetched beyond k, so the certificate rarely fails (module docstring)."""
    return max(8, k // 8)


class HalfScan:
    """fp16 scan + exact fp32 re-scoring of a flat inner-product index's vectors (module docstring)."""

    def __init__(self, index: Any, vectors: np.ndarray):
        d = vectors.shape[1]
        self.index = index  # the fp32 flat index, for queries without the certificate
        self.vectors = vectors  # (n, d) float32, the fp32 index's own storage (mmapped when it is)
        self.half = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        for block in _blocks(vectors):  # a memory-mapped matrix is paged in a block at a time
            self.half.add(np.ascontiguousarray(block))
        self.max_norm = float(np.sqrt(max(np.einsum("ij,ij->i", b, b).max() for b in _blocks(vectors))))
        self.rel = self.max_norm * (_REL + d * 2.0**-22)
        self.searches = 0  # queries answered through the copy
        self.fallbacks = 0  # of those, the ones whose certificate failed, searched again on the fp32 index

    @classmethod
    def build(cls, index: Any) -> HalfScan | None:
        """The copy for a flat inner-product FAISS index of HALF_SCAN_FROM_BYTES or more, else None (or when
        a vector holds a value fp16 cannot)."""
        if not isinstance(index, faiss.IndexFlatIP) or index.ntotal == 0:
            return None
        n, d = int(index.ntotal), int(index.d)
        if n * d * 4 < HALF_SCAN_FROM_BYTES:
            return None
        vectors = flat_vectors(index)
        if max(float(np.abs(b).max()) for b in _blocks(vectors)) > FP16_MAX / 2:
            logger.info("vectors exceed fp16's range: flat search scans them in fp32")
            return None
        return cls(index, vectors)

    def search(
        self, q: np.ndarray, k: int, run: Any, *, params: Any = None, available: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, positions), each (nq, k), best first, as the fp32 index answers them; `run(index, q, k,
        params)` searches a FAISS index (vector_index.faiss_search, which picks its OpenMP team). `params`
        may hold an id selector (deleted documents left out), with `available` the vectors it lets through
        (at least k)."""
        available = self.half.ntotal if available is None else available
        kk = min(available, k + margin(k))
        approx, cand = run(self.half, q, kk, params)  # (nq, kk) each
        scores = np.empty((len(q), k), np.float32)
        positions = np.empty((len(q), k), np.int64)
        redo = []
        self.searches += len(q)
        for i in range(len(q)):
            s = self.vectors[cand[i]] @ q[i]  # (kk,) exact inner products
            top = np.argsort(-s, kind="stable")[:k]  # (k,)
            scores[i], positions[i] = s[top], cand[i][top]
            if kk < available and not s[top[-1]] > approx[i, -1] + self.epsilon(q[i]):
                redo.append(i)
        if redo:
            self.fallbacks += len(redo)
            scores[redo], positions[redo] = run(self.index, q[redo], k, params)
        return scores, positions

    def usage(self) -> dict[str, int]:
        """What GET /bundles shows as `serving.half_scan`: the copy's bytes, queries through it, fallbacks."""
        return {"bytes": int(self.half.ntotal * self.half.code_size), "searches": self.searches,
                "fallbacks": self.fallbacks}  # fmt: skip

    def epsilon(self, q: np.ndarray) -> float:
        """The bound on |fp16 score − true score| for query q (module docstring)."""
        return float(np.linalg.norm(q)) * self.rel + _ABS * float(np.abs(q).sum())


def flat_vectors(index: Any) -> np.ndarray:
    """A flat FAISS index's (n, d) float32 storage as an array: a view, no copy."""
    n, d = int(index.ntotal), int(index.d)
    return faiss.rev_swig_ptr(index.get_xb(), n * d).reshape(n, d)


def kept_by(index: Any) -> HalfScan | None:
    """The copy a loaded index keeps (VectorIndex.keep_half_copy); None for none, or another backend (Milvus)."""
    half = getattr(index, "half", None)
    return half if isinstance(half, HalfScan) else None


def _blocks(vectors: np.ndarray, rows: int = 65_536) -> list[np.ndarray]:
    return [vectors[i : i + rows] for i in range(0, len(vectors), rows)]
