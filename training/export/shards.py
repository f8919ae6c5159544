"""Corpus embeddings on disk in memory-mapped shards, written and read chunk by chunk.

The offline path must work for corpora whose embeddings do not fit in RAM next to everything else:
encoding appends each encoded chunk to the current shard (`.npy` files written through
`numpy.lib.format.open_memmap`, so the OS pages them out) and `Shards.array()` memory-maps them back as
one read-only matrix when there is a single shard, or `Shards.chunks()` yields them piece by piece.
Index builders (training.export.index_factory for FAISS, training.export.milvus_build for Milvus) read `chunks` of a
memory-mapped matrix and compute exact top-k for recall tuning with `exact_top_k`, chunk by chunk, so
no step holds a second full copy of the corpus embeddings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import faiss
import numpy as np
from tqdm import tqdm

from contract.atomic import write_json_atomic
from contract.encoding.encoder import document_text
from contract.encoding.similarity import index_scores
from contract.errors import IndexBuildError
from contract.index.vector_index import faiss_metric
from training.data.progress import ENCODE_PHASE, report

if TYPE_CHECKING:
    from contract.encoding.encoder import Encoder
    from training.data.retrieval_data import Document
    from training.eval.embedding_cache import EmbeddingCache

logger = logging.getLogger(__name__)

CHUNK_ROWS = 4096  # rows per add/check/exact-search step: 6 MB at d = 384
SHARD_ROWS = 1 << 20  # rows per shard file (1.5 GB at d = 384)
INDEX_FILE = "shards.json"


def chunks(x: np.ndarray, rows: int = CHUNK_ROWS) -> Iterator[tuple[int, np.ndarray]]:
    """(start, float32 C-contiguous block) over the rows of `x` (a memmap stays a memmap until sliced)."""
    for start in range(0, len(x), rows):
        yield start, np.ascontiguousarray(x[start : start + rows], dtype=np.float32)


def check_finite(x: np.ndarray, name: str = "vectors") -> None:
    """NaN/inf check without a full-size boolean temporary."""
    for start, block in chunks(x):
        if not np.isfinite(block).all():
            raise IndexBuildError(f"{name} contain NaN or infinite values (rows from {start})")


def exact_top_k(x: np.ndarray, q: np.ndarray, k: int, metric: str) -> np.ndarray:
    """Exact top-k positions of each query (nq, k), best first, scanning `x` chunk by chunk.

    metric "ip": largest inner product; "l2": smallest squared distance (the −½‖u−v‖² score's order).
    """
    q = np.ascontiguousarray(q, dtype=np.float32)  # (nq, d)
    k = min(k, len(x))
    best_s = np.full((len(q), 0), -np.inf, dtype=np.float32)
    best_p = np.zeros((len(q), 0), dtype=np.int64)
    for start, block in chunks(x):
        dist, idx = faiss.knn(q, block, min(k, len(block)), metric=faiss_metric(metric))  # (nq, k) each
        s = index_scores(dist, metric)  # l2: −½ · squared distances, the smallest distance first
        pos = idx.astype(np.int64) + start
        cand_s, cand_p = np.concatenate([best_s, s], axis=1), np.concatenate([best_p, pos], axis=1)
        # stable: on ties the best so far (lower positions, earlier chunks) stay first
        keep = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        best_s, best_p = np.take_along_axis(cand_s, keep, 1), np.take_along_axis(cand_p, keep, 1)
    return best_p


class ShardWriter:
    """Append float32 rows to memory-mapped `.npy` shards in `folder`; `close()` writes the index."""

    def __init__(self, folder: str | Path, dim: int, total: int, shard_rows: int = SHARD_ROWS):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.dim, self.total, self.shard_rows = dim, total, shard_rows
        self.files: list[tuple[str, int]] = []
        self._written = 0
        self._current: np.memmap | None = None
        self._offset = 0

    def append(self, block: np.ndarray) -> None:
        block = np.asarray(block, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != self.dim:
            raise IndexBuildError(f"embedding chunk has shape {block.shape}, expected (n, {self.dim})")
        if self._written + len(block) > self.total:
            raise IndexBuildError(f"more than the {self.total} announced rows")
        done = 0
        while done < len(block):
            if self._current is None or self._offset == len(self._current):
                self._open_next()
            assert self._current is not None
            n = min(len(block) - done, len(self._current) - self._offset)
            self._current[self._offset : self._offset + n] = block[done : done + n]
            self._offset += n
            done += n
        self._written += len(block)

    def _open_next(self) -> None:
        self._flush()
        rows = min(self.shard_rows, self.total - sum(r for _, r in self.files))
        name = f"shard-{len(self.files):05d}.npy"
        self._current = np.lib.format.open_memmap(
            self.folder / name, mode="w+", dtype=np.float32, shape=(rows, self.dim)
        )
        self.files.append((name, rows))
        self._offset = 0

    def _flush(self) -> None:
        if self._current is not None:
            self._current.flush()
            self._current = None

    def close(self) -> Shards:
        if self._written != self.total:
            raise IndexBuildError(f"{self._written} rows written, {self.total} announced")
        self._flush()
        write_json_atomic(self.folder / INDEX_FILE, {"dim": self.dim, "files": self.files}, indent=None)
        return Shards(self.folder)


class Shards:
    """Read side: the shards of a folder, memory-mapped read-only."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        meta = json.loads((self.folder / INDEX_FILE).read_text())
        self.dim = int(meta["dim"])
        self.files = [(str(name), int(rows)) for name, rows in meta["files"]]

    def __len__(self) -> int:
        return sum(rows for _, rows in self.files)

    def maps(self) -> list[np.ndarray]:
        return [np.load(self.folder / name, mmap_mode="r") for name, _ in self.files]

    def array(self) -> np.ndarray:
        """One (n, dim) read-only memmap (a single shard), for callers that index rows directly."""
        maps = self.maps()
        if not maps:  # an empty corpus: nothing was written
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(maps) != 1:
            raise IndexBuildError(f"{self.folder}: {len(maps)} shards; read them with chunks()")
        return maps[0]


def encode_to_shards(
    encoder: Encoder,
    texts: Sequence[str] | Iterable[str],
    total: int,
    folder: str | Path,
    *,
    chunk_rows: int = 1024,
    batch_size: int = 32,
    checkpoint: Callable[[], None] | None = None,
    show_progress: bool = False,
) -> Shards:
    """Encode documents `chunk_rows` at a time straight into one shard (no in-memory concatenation).

    `checkpoint` is called before each chunk; it cancels the encoding by raising (a job's cancel).
    """
    writer = ShardWriter(folder, encoder.dim, total, shard_rows=max(total, 1))
    buffer: list[str] = []
    report(ENCODE_PHASE, 0, total)
    with tqdm(total=total, desc="encoding documents", unit="doc", disable=not show_progress) as bar:

        def flush() -> None:
            if checkpoint is not None:
                checkpoint()
            writer.append(encoder.encode(buffer, kind="document", batch_size=batch_size))  # (chunk, dim)
            bar.update(len(buffer))
            buffer.clear()
            report(ENCODE_PHASE, bar.n, total)

        for text in texts:
            buffer.append(text)
            if len(buffer) == chunk_rows:
                flush()
        if buffer:
            flush()
    return writer.close()


def encode_corpus_to_disk(
    encoder: Encoder,
    corpus: Mapping[str, Document],
    folder: str | Path,
    *,
    cache: EmbeddingCache | None = None,
    batch_size: int = 32,
    show_progress: bool = True,
    checkpoint: Callable[[], None] | None = None,
) -> np.ndarray:
    """The corpus embeddings (n, dim) in corpus order as a read-only memory map, never a RAM matrix.

    Encoded chunk by chunk into a shard in `folder` (training.eval.evaluate.encode_corpus fills one RAM
    matrix, chunk by chunk); with `cache` a hit is the cache's own memory map and a miss is stored there from the shard.
    """
    texts = [document_text(doc.title, doc.text) for doc in corpus.values()]

    def encode() -> np.ndarray:
        shards = encode_to_shards(
            encoder,
            texts,
            len(texts),
            folder,
            batch_size=batch_size,
            checkpoint=checkpoint,
            show_progress=show_progress,
        )
        return shards.array()

    return encode() if cache is None else cache.get_or_compute(encoder, texts, encode)


def index_space(encoder: Encoder, emb: np.ndarray, folder: str | Path) -> np.ndarray:
    """encoder.to_index_space(emb) without a second full copy in RAM: the identity for cosine models;
    AnInfoNCE's √Λ-scaled rows are written chunk by chunk to a shard in `folder` and memory-mapped."""
    if encoder.similarity.identity_index_space:
        return emb if emb.dtype == np.float32 and emb.flags.c_contiguous else encoder.to_index_space(emb)
    writer = ShardWriter(folder, emb.shape[1], len(emb), shard_rows=max(len(emb), 1))
    for _, block in chunks(emb):
        writer.append(encoder.to_index_space(block))
    return writer.close().array()
