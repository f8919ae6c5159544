"""One request as the inference path sees it, and its answer: a search (SearchSpec → SearchAnswer) or an
embedding (EmbedSpec → EmbedAnswer).

Built by the routes (search, embed, readyz's canary), carried through app/engine/batching.py and
app/engine/token_slicing.py, answered by app.engine.live_bundle.LiveBundle.
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
    """One search request, validated: text queries or index-space vectors, and what to return."""

    texts: list[str] | None
    vectors: np.ndarray | None  # (n, dim) index space, when the request gave vectors
    top_k: int
    filter: dict[str, Any] | None = None
    min_score: float | None = None
    include: Sequence[str] = ()
    tokens: list[int] | None = None  # per text, as the encoder will see them (app/engine/token_slicing.py)
    # per text, its one tokenisation, encoded as it is (app/engine/query_tokens.py); None for a cache hit
    token_ids: list[list[int] | None] | None = None
    # per text, its index-space row when the route found it in the query cache (app/engine/query_cache.py)
    cached: list[np.ndarray | None] | None = None
    mode: str = (
        "dense"  # dense | lexical | hybrid, resolved against the bundle (app/engine/retrieval_modes.py)
    )

    @property
    def n(self) -> int:
        return len(self.texts) if self.texts is not None else len(self.vectors)  # type: ignore[arg-type]


@dataclass
class PreparedQueries:
    """A request's query texts after the cache lookup and the one tokenisation of the misses
    (LiveBundle.prepare_queries): per text its token count, its ids (None: cached) and its cached row."""

    tokens: list[int]
    token_ids: list[list[int] | None]
    cached: list[np.ndarray | None]


@dataclass
class EmbedSpec:
    """One POST /embed or /v1/embeddings request: texts to turn into index-space vectors, no search."""

    texts: list[str]
    kind: TextKind  # query: the served query encoder; document: the full model, as the corpus was encoded
    tokens: list[int] | None = None  # as SearchSpec's
    token_ids: list[list[int]] | None = None

    @property
    def n(self) -> int:
        return len(self.texts)


@dataclass
class SearchAnswer:
    hits: list[list[Hit]]  # per query, best first
    encode_ms: float  # shared by the micro-batch the request was part of
    search_ms: float


@dataclass
class EmbedAnswer:
    vectors: np.ndarray  # (n, dim) index space
    encode_ms: float  # shared by the micro-batch the request was part of
    search_ms: float = 0.0  # nothing searched


Spec = SearchSpec | EmbedSpec
Answer = SearchAnswer | EmbedAnswer
