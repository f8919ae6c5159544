"""Fold the mutation log into the corpus a reindex or retrain encodes (the build side of issue 18).

A job reads the log's head seq S once, applies every row up to S to the dataset's corpus (the last write
per id wins: an upsert adds or replaces the document, a delete removes it), encodes only the documents
the log added or changed, and records S in the manifest (`extras["mutation_seq"]`). Replicas serving
the new bundle then replay only rows after S, so nothing is applied twice and writes that arrived
during the build are not lost.

The gate's metrics are still measured on the dataset as it is (its evaluation fingerprint unchanged):
the gate judges the model against the live one on the same evaluation set; the folded corpus is what is
served.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contract.encoding.encoder import Encoder, document_text
from contract.mutations.log import MutationLog, latest_per_document
from training.data.retrieval_data import Document
from training.export.shards import CHUNK_ROWS, ShardWriter

logger = logging.getLogger(__name__)


@dataclass
class Folded:
    corpus: dict[str, Document]
    embeddings: np.ndarray  # (n, dim) Encoder.encode rows in corpus order
    seq: int  # last log seq folded in
    upserted: int
    deleted: int


def fold_log(
    bundles_dir: str | Path,
    corpus: dict[str, Document],
    embeddings: np.ndarray,
    encoder: Encoder,
    *,
    batch_size: int = 32,
    show_progress: bool = False,
    out_dir: str | Path | None = None,
) -> Folded:
    """`corpus` with every log row up to the log's current head applied; `embeddings` rows follow it.

    `out_dir`: write the folded rows there chunk by chunk and return them memory-mapped (the offline path
    streams, training/export/shards.py) instead of gathering and concatenating them in RAM.
    """
    log = MutationLog(bundles_dir)
    seq = log.head()
    if seq == 0:
        return Folded(corpus, embeddings, 0, 0, 0)
    net = latest_per_document(log.entries(0, seq))
    keep = [i for i, doc_id in enumerate(corpus) if doc_id not in net]
    ids = list(corpus)
    out = {ids[i]: corpus[ids[i]] for i in keep}
    upserts = [m for m in net.values() if m.op == "upsert"]
    for m in upserts:
        out[m.doc_id] = Document(id=m.doc_id, title=m.title, text=m.text, metadata=dict(m.metadata))
    texts = [document_text(m.title, m.text) for m in upserts]
    added = (  # (n_upserts, dim)
        encoder.encode(texts, kind="document", batch_size=batch_size, show_progress=show_progress)
        if texts
        else np.zeros((0, embeddings.shape[1]), dtype=np.float32)
    )
    deleted = sum(1 for m in net.values() if m.op == "delete" and m.doc_id in corpus)
    logger.info(
        "folded mutation log up to seq %d: %d upserted, %d deleted, %d documents",
        seq,
        len(upserts),
        deleted,
        len(out),
    )
    return Folded(out, _rows(embeddings, keep, added, out_dir), seq, len(upserts), deleted)


def _rows(
    embeddings: np.ndarray, keep: list[int], added: np.ndarray, out_dir: str | Path | None
) -> np.ndarray:
    """embeddings[keep] followed by `added` (n_keep + n_added, dim): in RAM, or streamed to `out_dir`."""
    if out_dir is None:
        return np.concatenate([embeddings[keep], added]).astype(np.float32, copy=False)
    writer = ShardWriter(
        out_dir, embeddings.shape[1], len(keep) + len(added), shard_rows=len(keep) + len(added) or 1
    )
    for start in range(0, len(keep), CHUNK_ROWS):
        writer.append(embeddings[keep[start : start + CHUNK_ROWS]])  # (chunk, dim) gathered rows
    if len(added):
        writer.append(added)
    return writer.close().array()
