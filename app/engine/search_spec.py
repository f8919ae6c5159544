"""One search request as the inference path sees it (SearchSpec) and its answer (SearchAnswer).

Built by the routes (search, embed, readyz's canary), carried through app/engine/batching.py and
app/engine/token_slicing.py, run by app.engine.live_bundle.LiveBundle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.schemas.search import Hit
from contract.encoding.encoder import TextKind


@dataclass
class SearchSpec:
    """One request, validated: text queries or index-space vectors, and what to return."""

    texts: list[str] | None
    vectors: np.ndarray | None  # (n, dim) index space, when the request gave vectors
    k: int
    filter: dict[str, Any] | None = None
    min_score: float | None = None
    include: Sequence[str] = ()
    tokens: list[int] | None = None  # per text, as the encoder will see them (app/engine/token_slicing.py)
    embed: TextKind | None = None  # POST /embed: return the index-space vectors of `texts`, no search
    mode: str = (
        "dense"  # dense | lexical | hybrid, resolved against the bundle (app/engine/retrieval_modes.py)
    )

    @property
    def n(self) -> int:
        return len(self.texts) if self.texts is not None else len(self.vectors)  # type: ignore[arg-type]


@dataclass
class SearchAnswer:
    hits: list[list[Hit]]  # per query, best first
    encode_ms: float  # shared by the micro-batch the request was part of
    search_ms: float
    vectors: np.ndarray | None = None  # (n, dim) index space, for an `embed` spec
