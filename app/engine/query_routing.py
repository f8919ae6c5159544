"""A routed query encoder: the cheap tower for confident queries, the full model for the rest.

`RoutedEncoder.encode` encodes a batch with the cheap encoder (static table or truncated transformer),
searches each vector's top two documents in the bundle's own index, and re-encodes with the full model
(the fastest full-model backend the bundle serves within the nDCG budget) the queries whose top-1 −
top-2 margin is below the threshold (contract/encoding/routing.py says why the margin, and how the
bundle records the curve the threshold comes from), and those holding a token the static table was not
distilled on (`StaticQueryEncoder.novel`: its row was never trained, so a document written about a word
the corpus lacks would be missed by dense search; issue 44). Its output replaces those rows, so everything
after encoding (query cache, micro-batched search, hybrid fusion) is unchanged.

The threshold is the smallest recorded share whose nDCG@10 loss is within `max_ndcg_loss`
(`SEARCH_ROUTE_MARGIN` sets one by hand). Its cost per query is the cheap encode, one top-2 search of
the batch, and the full encode of the routed share; `auto` times it like every other candidate.
Counts since load (queries, routed, and novel: routed for an unseen token alone) show in GET /bundles under `encoder_choice.routing`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.engine.query_tokens import encode_ids
from contract.encoding.routing import top2_margins


class RoutedEncoder:
    """`cheap` for every query, `fallback` for those whose top-2 margin in `index` is below `margin`."""

    def __init__(
        self,
        cheap: Any,
        fallback: Any,
        *,
        index: Any,
        to_index_space: Callable[[np.ndarray], np.ndarray],
        margin: float,
        cheap_batch: int,
        fallback_batch: int,
    ):
        self.cheap, self.fallback = cheap, fallback
        self.index, self.to_index_space = index, to_index_space
        self.margin = margin
        self.cheap_batch, self.fallback_batch = cheap_batch, fallback_batch
        # shown live in GET /bundles (encoder_choice.routing): updated in place under the lock
        self.counts = {"queries": 0, "routed": 0, "novel": 0}
        self._lock = threading.Lock()

    @property
    def sides(self) -> tuple[Any, Any]:
        return self.cheap, self.fallback

    def encode(self, texts: Sequence[str], *, kind: str = "query", batch_size: int = 64) -> np.ndarray:
        """float32 (n, D) normalised query vectors: the cheap encoder's, or the full model's when routed."""
        del batch_size  # each side uses its own
        texts = list(texts)
        novel = getattr(self.cheap, "novel_texts", None)
        return self._routed(
            texts,
            lambda: self.cheap.encode(texts, kind=kind, batch_size=self.cheap_batch),
            lambda: novel(texts) if novel is not None else np.zeros(len(texts), dtype=bool),
            lambda rows: self.fallback.encode(
                [texts[i] for i in rows], kind=kind, batch_size=self.fallback_batch
            ),
        )

    def encode_ids(
        self, texts: Sequence[str], token_ids: Sequence[Sequence[int]], batch_size: int = 64
    ) -> np.ndarray:
        """As `encode`, from the request's one tokenisation: the escalated queries reuse the same ids."""
        del batch_size
        texts = list(texts)
        novel = getattr(self.cheap, "novel_ids", None)
        return self._routed(
            texts,
            lambda: encode_ids(self.cheap, texts, token_ids, batch_size=self.cheap_batch),
            lambda: novel(token_ids) if novel is not None else np.zeros(len(texts), dtype=bool),
            lambda rows: encode_ids(
                self.fallback,
                [texts[i] for i in rows],
                [token_ids[i] for i in rows],
                batch_size=self.fallback_batch,
            ),
        )

    def _routed(
        self,
        texts: list[str],
        cheap: Callable[[], np.ndarray],
        novel: Callable[[], np.ndarray],
        full: Callable[[np.ndarray], np.ndarray],
    ) -> np.ndarray:
        emb = np.array(cheap(), dtype=np.float32)  # (n, D)
        unseen = novel()  # (n,) bool: a token the cheap encoder was not distilled on
        unsure = top2_margins(self.index, self.to_index_space(emb)) < self.margin  # (n,) bool
        # unconditional, whatever the margin: a recorded curve measured on the corpus's own queries may put
        # the margin at 0, and an acknowledged write must still be findable by dense search
        routed = np.flatnonzero(unsure | unseen)
        if len(routed):
            emb[routed] = full(routed)
        with self._lock:
            self.counts["queries"] += len(texts)
            self.counts["routed"] += len(routed)
            self.counts["novel"] += int((unseen & ~unsure).sum())
        return emb
