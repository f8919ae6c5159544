"""An LRU cache of query embeddings, keyed by (bundle version, encoder backend, normalised text).

Search traffic repeats itself (popular queries follow a Zipf-like law), and a repeated query costs the
encoder the same every time. The key holds the bundle version and the backend, so a hot swap or another
encoder never serves a stale vector; old entries simply age out. Normalisation is only what cannot
change the vector: surrounding whitespace and runs of whitespace (BERT-style tokenizers split on any
whitespace). Case is kept: a cased model would see a different text.

The cache is used from the one inference thread (app/engine/batching.py), and takes a lock anyway so that it
stays correct if that ever changes. Hits and misses are Prometheus counters (/metrics).
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
        self._entries: OrderedDict[Key, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._hits, self._misses = hits, misses  # prometheus Counters (or None)

    def __len__(self) -> int:
        return len(self._entries)

    def encode(
        self,
        version: str,
        encoder_backend: str,
        texts: Sequence[str],
        encode: Callable[[list[str]], np.ndarray],
    ) -> np.ndarray:
        """Rows for `texts` (n, dim): cached ones copied, the others computed by `encode` in one call."""
        keys = [(version, encoder_backend, normalise(t)) for t in texts]
        found: dict[int, np.ndarray] = {}
        with self._lock:
            for i, key in enumerate(keys):
                row = self._entries.get(key)
                if row is not None:
                    self._entries.move_to_end(key)
                    found[i] = row
        missing = [i for i in range(len(texts)) if i not in found]
        self._count(len(found), len(missing))
        if not missing:
            return np.stack([found[i] for i in range(len(texts))])
        computed = encode([texts[i] for i in missing])  # (n_missing, dim)
        out = np.empty((len(texts), computed.shape[1]), dtype=computed.dtype)
        for i, row in found.items():
            out[i] = row
        out[missing] = computed
        with self._lock:
            for i, row in zip(missing, computed, strict=True):
                self._entries[keys[i]] = row.copy()
                self._entries.move_to_end(keys[i])
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return out

    def _count(self, hits: int, misses: int) -> None:
        if self._hits is not None and hits:
            self._hits.inc(hits)
        if self._misses is not None and misses:
            self._misses.inc(misses)
