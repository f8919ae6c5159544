"""Corpus embeddings on disk, content-addressed: a corpus is encoded once per model, never twice.

Encoding the corpus is the costly part of every run (a base evaluation, mining, a tuned evaluation, the
report, the index). Within one run the embeddings are passed along in memory; across runs (a retrain
job on an unchanged corpus, `train` then `index`, a demo restarted) this cache answers instead of the
encoder. The key is a sha256 over everything that determines the vectors:

- the model fingerprint: every parameter and buffer tensor (name, dtype, shape, bytes), the module
  configuration (pooling, normalisation) and the learned similarity;
- the corpus fingerprint: the exact texts encoded, in order;
- the max sequence length (texts are cut there).

Each entry is `<key>.npy` (float32 rows) plus `<key>.json` (shape and the .npy's sha256). A hit is
verified against that checksum and then memory-mapped read-only, so the embeddings live once, in the
page cache, however many phases read them. A file that does not match is recomputed and rewritten, never
trusted. Writes go to a temp file and `os.replace`, so concurrent writers of one key (two jobs) are safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.atomic import atomic_path, write_json_atomic

if TYPE_CHECKING:
    from contract.encoding.encoder import Encoder

logger = logging.getLogger(__name__)

FORMAT = 1  # bump when the file layout or the key's ingredients change
# entries kept, most recently used first: every retrain adds its tuned model's encoding, so the folder
# would otherwise grow by one corpus encoding per run
MAX_ENTRIES = 8
_CHUNK = 1 << 20


def model_fingerprint(encoder: Encoder) -> str:
    """sha256 of the model's tensors, module configuration and similarity (changes when it trains)."""
    h = hashlib.sha256()
    for name, tensor in encoder.model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.view(-1).view(dtype=_byte_dtype()).numpy().tobytes())
    modules = [
        {"type": type(m).__name__, "config": _config(m)}
        for m in getattr(encoder.model, "_modules", {}).values()
    ]
    h.update(
        json.dumps({"modules": modules, "similarity": encoder.similarity.to_json()}, sort_keys=True).encode()
    )
    return h.hexdigest()


def corpus_fingerprint(texts: Sequence[str]) -> str:
    """sha256 of the texts in order (length-prefixed, so no two lists collide by concatenation)."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def _config(module: Any) -> Any:
    getter = getattr(module, "get_config_dict", None)
    try:
        return getter() if getter is not None else None
    except Exception:  # a module whose config is not JSON-ready still has a type name in the key
        return None


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


class EmbeddingCache:
    """A folder of content-addressed corpus embeddings (see the module docstring)."""

    def __init__(self, folder: str | Path, *, max_entries: int = MAX_ENTRIES):
        self.folder = Path(folder)
        self.max_entries = max_entries

    def key(self, encoder: Encoder, texts: Sequence[str]) -> str:
        encoder = encoder.documents  # corpus embeddings: a two-tower model's document tower
        parts = {
            "format": FORMAT,
            "model": model_fingerprint(encoder),
            "corpus": corpus_fingerprint(texts),
            "max_seq_length": int(getattr(encoder.model, "max_seq_length", 0) or 0),
        }
        backend = getattr(encoder, "document_backend", "torch")  # ONNX-encoded corpora (corpus_encoder.py)
        if backend != "torch":
            parts["backend"] = backend
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def get(self, key: str, n_rows: int | None = None) -> np.ndarray | None:
        """The verified, memory-mapped embeddings of `key`, or None (absent, or failing verification)."""
        data, meta = self.folder / f"{key}.npy", self.folder / f"{key}.json"
        if not data.is_file() or not meta.is_file():
            return None
        try:
            info = json.loads(meta.read_text(encoding="utf-8"))
            if info.get("format") != FORMAT or info.get("key") != key:
                raise ValueError("metadata does not name this key")
            if _sha256_file(data) != info["sha256"]:
                raise ValueError("checksum mismatch")
            emb = np.load(data, mmap_mode="r")
            if list(emb.shape) != info["shape"] or emb.dtype != np.float32:
                raise ValueError(f"shape {emb.shape} / dtype {emb.dtype} differ from the metadata")
            if n_rows is not None and emb.shape[0] != n_rows:
                raise ValueError(f"{emb.shape[0]} rows for {n_rows} texts")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("embedding cache: %s is unusable (%s); recomputing", data, exc)
            return None
        os.utime(meta)  # recently used: pruned last
        return emb

    def put(self, key: str, emb: np.ndarray) -> np.ndarray:
        """Store (n, dim) float32 rows under `key`; returns them memory-mapped from the file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        data = self.folder / f"{key}.npy"
        with atomic_path(data) as tmp:
            with open(tmp, "xb") as f:
                np.save(f, np.ascontiguousarray(emb, dtype=np.float32))
            info = {"format": FORMAT, "key": key, "shape": list(emb.shape), "sha256": _sha256_file(tmp)}
        write_json_atomic(self.folder / f"{key}.json", info, indent=None)
        self.prune()
        return np.load(data, mmap_mode="r")

    def prune(self) -> None:
        """Delete all but the `max_entries` most recently used entries (a reader's open memory map survives)."""
        metas = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for meta in metas[self.max_entries :]:
            for path in (meta.with_suffix(".npy"), meta):
                path.unlink(missing_ok=True)

    def get_or_compute(
        self, encoder: Encoder, texts: Sequence[str], compute: Callable[[], np.ndarray]
    ) -> np.ndarray:
        """The cached embeddings of `texts` under `encoder`, or `compute()`'s, stored for next time."""
        key = self.key(encoder, texts)
        hit = self.get(key, n_rows=len(texts))
        if hit is not None:
            logger.info("embedding cache hit: %d documents (%s…)", len(texts), key[:12])
            return hit
        return self.put(key, compute())
