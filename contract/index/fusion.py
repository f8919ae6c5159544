"""Fusing a dense and a lexical ranking into one (hybrid search): reciprocal rank fusion and a convex
combination of normalised scores. Pure numpy; the parameters are tuned on validation queries at index
time (training.hybrid.fusion_tuning) and recorded in the bundle manifest (`extras["retrieval"]`).

- RRF (Cormack, Clarke & Büttcher, SIGIR 2009): fused(d) = Σ_lists 1 / (rrf_k + rank(d)), rank from 1; a
  document absent from a list gets nothing from it. Scores lie in (0, 2 / (rrf_k + 1)].
- Convex (Bruch, Gai & Ingber 2022, arXiv 2210.11934, who find it beats RRF once α is tuned):
  fused(d) = α · norm_dense(d) + (1 − α) · norm_lexical(d), each list min-max normalised over its own
  candidates (best → 1, worst → 0; a one-document list → 1); absent → 0. Scores lie in [0, 1].

Both take each retriever's top `depth` candidates (at least the requested top-k). Ties break by position.
Scores stay float32, as the rankings come in and the API returns them: each position's terms (one per
list) are summed in float32.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from contract.index.vector_index import Ranking

MODES = ("dense", "lexical", "hybrid")
Mode = Literal["dense", "lexical", "hybrid"]
DEFAULT_DEPTH = 100
RECORD_RRF_K = "k"  # the manifest key of FusionParams.rrf_k (unchanged since hybrid search shipped)


@dataclass(frozen=True)
class FusionParams:
    method: Literal["rrf", "convex"] = "rrf"
    rrf_k: float = 60.0  # RRF's constant (60 in the paper); not a top-k
    alpha: float = 0.5  # convex: weight of the dense side
    depth: int = DEFAULT_DEPTH  # candidates taken from each retriever

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> FusionParams:
        """Read a manifest's `extras.retrieval.fusion` (RRF's constant is recorded as `k`)."""
        rec = dict(record or {})
        if RECORD_RRF_K in rec:
            rec["rrf_k"] = rec.pop(RECORD_RRF_K)
        return cls(**{k: v for k, v in rec.items() if k in ("method", "rrf_k", "alpha", "depth")})

    def record(self) -> dict[str, Any]:
        """The manifest form: the fields, RRF's constant under `k` as every published bundle has it."""
        rec = asdict(self)
        rec[RECORD_RRF_K] = rec.pop("rrf_k")
        return rec


def _ordered(positions: np.ndarray, scores: np.ndarray, top_k: int) -> Ranking:
    """Sum the float32 contributions per position; best first, ties by position, at most `top_k`.

    One sort and a segmented sum (a position has at most one term per list, so at most two terms, whose
    float32 sum does not depend on their order): about a third of np.unique + np.add.at's cost at the
    ~200 candidates of a hybrid query, which runs once per query (bench/serving/hybrid_latency.py)."""
    if len(positions) == 0:
        return positions.astype(np.int64), np.zeros(0, dtype=np.float32)
    by_pos = np.argsort(positions, kind="stable")
    sorted_pos = positions[by_pos]
    starts = np.flatnonzero(np.concatenate(([True], sorted_pos[1:] != sorted_pos[:-1])))
    pos = sorted_pos[starts]  # (n_unique,) ascending
    fused = np.add.reduceat(scores[by_pos].astype(np.float32, copy=False), starts)  # (n_unique,) float32
    order = np.lexsort((pos, -fused))[:top_k]  # best first, ties by position
    return pos[order], fused[order]


def rrf(dense: Ranking, lexical: Ranking, *, rrf_k: float = 60.0, top_k: int | None = None) -> Ranking:
    lists = [
        (positions, np.arange(1, len(positions) + 1, dtype=np.float32)) for positions, _ in (dense, lexical)
    ]
    positions = np.concatenate([p for p, _ in lists]).astype(np.int64)
    contrib = np.concatenate([np.float32(1.0) / (np.float32(rrf_k) + ranks) for _, ranks in lists])
    return _ordered(positions, contrib, top_k if top_k is not None else len(positions))


def min_max(scores: np.ndarray) -> np.ndarray:
    """Best → 1, worst → 0 within one list; a list of equal scores (or one score) → all 1 (float32)."""
    s = np.asarray(scores, dtype=np.float32)
    if len(s) == 0:
        return s
    lo, hi = s.min(), s.max()
    return np.ones_like(s) if hi == lo else (s - lo) / (hi - lo)


def convex(dense: Ranking, lexical: Ranking, *, alpha: float = 0.5, top_k: int | None = None) -> Ranking:
    positions = np.concatenate([dense[0], lexical[0]]).astype(np.int64)
    contrib = np.concatenate(
        [np.float32(alpha) * min_max(dense[1]), np.float32(1.0 - alpha) * min_max(lexical[1])]
    )
    return _ordered(positions, contrib, top_k if top_k is not None else len(positions))


def fuse(dense: Ranking, lexical: Ranking, params: FusionParams, top_k: int) -> Ranking:
    if params.method == "rrf":
        return rrf(dense, lexical, rrf_k=params.rrf_k, top_k=top_k)
    return convex(dense, lexical, alpha=params.alpha, top_k=top_k)
