"""Fusing a dense and a lexical ranking into one (hybrid search): reciprocal rank fusion and a convex
combination of normalised scores. Pure numpy; the parameters are tuned on validation queries at index
time (training.hybrid.fusion_tuning) and recorded in the bundle manifest (`extras["retrieval"]`).

- RRF (Cormack, Clarke & Büttcher, SIGIR 2009): fused(d) = Σ_lists 1 / (k + rank(d)), rank from 1; a
  document absent from a list gets nothing from it. Scores lie in (0, 2 / (k + 1)].
- Convex (Bruch, Gai & Ingber 2022, arXiv 2210.11934, who find it beats RRF once α is tuned):
  fused(d) = α · norm_dense(d) + (1 − α) · norm_lexical(d), each list min-max normalised over its own
  candidates (best → 1, worst → 0; a one-document list → 1); absent → 0. Scores lie in [0, 1].

Both take each retriever's top `depth` candidates (at least the requested k). Ties break by position.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from contract.index.vector_index import Ranking

MODES = ("dense", "lexical", "hybrid")
Mode = Literal["dense", "lexical", "hybrid"]
DEFAULT_DEPTH = 100


@dataclass(frozen=True)
class FusionParams:
    method: Literal["rrf", "convex"] = "rrf"
    k: float = 60.0  # RRF's constant (60 in the paper)
    alpha: float = 0.5  # convex: weight of the dense side
    depth: int = DEFAULT_DEPTH  # candidates taken from each retriever

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> FusionParams:
        return cls(**{k: v for k, v in (record or {}).items() if k in ("method", "k", "alpha", "depth")})

    def record(self) -> dict[str, Any]:
        return asdict(self)


def _ordered(scores: dict[int, float], top: int) -> Ranking:
    pos = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    val = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    order = np.lexsort((pos, -val))[:top]  # best first, ties by position
    return pos[order], val[order].astype(np.float32)


def rrf(dense: Ranking, lexical: Ranking, *, k: float = 60.0, top: int | None = None) -> Ranking:
    fused: dict[int, float] = {}
    for positions, _ in (dense, lexical):
        for rank, p in enumerate(positions.tolist(), start=1):
            fused[p] = fused.get(p, 0.0) + 1.0 / (k + rank)
    return _ordered(fused, top if top is not None else len(fused))


def min_max(scores: np.ndarray) -> np.ndarray:
    """Best → 1, worst → 0 within one list; a list of equal scores (or one score) → all 1."""
    if len(scores) == 0:
        return scores.astype(np.float64)
    s = scores.astype(np.float64)
    lo, hi = s.min(), s.max()
    return np.ones_like(s) if hi == lo else (s - lo) / (hi - lo)


def convex(dense: Ranking, lexical: Ranking, *, alpha: float = 0.5, top: int | None = None) -> Ranking:
    fused: dict[int, float] = {}
    for (positions, scores), weight in ((dense, alpha), (lexical, 1.0 - alpha)):
        for p, s in zip(positions.tolist(), min_max(scores).tolist(), strict=True):
            fused[p] = fused.get(p, 0.0) + weight * s
    return _ordered(fused, top if top is not None else len(fused))


def fuse(dense: Ranking, lexical: Ranking, params: FusionParams, top: int) -> Ranking:
    if params.method == "rrf":
        return rrf(dense, lexical, k=params.k, top=top)
    return convex(dense, lexical, alpha=params.alpha, top=top)
