"""An LRU cache of query embeddings, keyed by (bundle version, encoder backend, normalised text).

Search traffic repeats itself (popular queries follow a Zipf-like law), and a repeated query costs the
encoder the same every time. The key holds the bundle version and the backend, so a hot swap or another
encoder never serves a stale vector; old entries simply age out. Normalisation is only what cannot
change the vector: surrounding whitespace and runs of whitespace (BERT-style tokenizers split on any
whitespace). Case is kept: a cased model would see a different text.

A search request looks its texts up on its own thread before anything else (`lookup`,
LiveBundle.prepare_queries): a hit needs no tokenisation, no encode and no token count, since the entry
keeps the text's token count with its vector (the request's token budget still counts it). The misses are
encoded on the inference thread (app/engine/batching.py) and `store`d. Other callers (/embed queries,
the canary) go through `encode`. A lock guards the entries either way. Hits and misses are Prometheus
counters (/metrics), counted once per text at its lookup.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Key = tuple[str, str, str]


def normalise(text: str) -> str:
    return " ".join(text.split())


class QueryCache:
    def __init__(self, max_entries: int, *, hits: Any = None, misses: Any = None):
        self.max_entries = max_entries
        self._entries: OrderedDict[Key, tuple[np.ndarray, int | None]] = OrderedDict()  # row, tokens
        self._lock = threading.Lock()
        self._hits, self._misses = hits, misses  # prometheus Counters (or None)

    def __len__(self) -> int:
        return len(self._entries)

    def key(self, version: str, encoder_backend: str, text: str) -> Key:
        return (version, encoder_backend, normalise(text))

    def lookup(self, keys: Sequence[Key]) -> list[tuple[np.ndarray, int | None] | None]:
        """Per key its (row, token count) or None; hits and misses counted."""
        found: list[tuple[np.ndarray, int | None] | None] = []
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                found.append(entry)
        hits = sum(e is not None for e in found)
        self._count(hits, len(found) - hits)
        return found

    def store(self, keys: Sequence[Key], rows: np.ndarray, tokens: Sequence[int | None]) -> None:
        with self._lock:
            for key, row, n in zip(keys, rows, tokens, strict=True):
                self._entries[key] = (row.copy(), n)
                self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def encode(
        self,
        version: str,
        encoder_backend: str,
        texts: Sequence[str],
        encode: Callable[[list[str]], np.ndarray],
        tokens: Sequence[int | None] | None = None,
    ) -> np.ndarray:
        """Rows for `texts` (n, dim): cached ones copied, the others computed by `encode` in one call
        (and stored with their `tokens` counts, when given)."""
        keys = [self.key(version, encoder_backend, t) for t in texts]
        entries = self.lookup(keys)
        missing = [i for i, e in enumerate(entries) if e is None]
        if not missing:
            return np.stack([e[0] for e in entries if e is not None])
        computed = encode([texts[i] for i in missing])  # (n_missing, dim)
        out = np.empty((len(texts), computed.shape[1]), dtype=computed.dtype)
        for i, e in enumerate(entries):
            if e is not None:
                out[i] = e[0]
        out[missing] = computed
        counts = [None if tokens is None else tokens[i] for i in missing]
        self.store([keys[i] for i in missing], computed, counts)
        return out

    def _count(self, hits: int, misses: int) -> None:
        if self._hits is not None and hits:
            self._hits.inc(hits)
        if self._misses is not None and misses:
            self._misses.inc(misses)
