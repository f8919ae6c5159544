"""Anchors: one split's (query, positive) pairs as rows of a similarity matrix over the document pool —
what every section of the gap report (risk, R(k) curve, mutual information) and the served query
encoders' risks (training.gap.served_risk) are computed from. The matrix is the model's own Similarity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from contract.encoding.encoder import Encoder
from contract.encoding.similarity import Similarity
from contract.errors import ConfigError
from contract.log_setup import progress_bars_enabled
from training.data.retrieval_data import Document
from training.eval.evaluate import encode_corpus
from training.gap.estimators import pad_exclusions


@dataclass
class Anchors:
    """(query, positive) pairs of one split as rows into a similarity matrix over the pool."""

    sim: np.ndarray  # (n_anchors, n_pool) learned similarity to every pool document
    pos: np.ndarray  # (n_anchors,) similarity to the positive
    exclude: np.ndarray  # (n_anchors, P) pool columns never drawn as negatives (the query's positives)
    groups: np.ndarray  # (n_anchors,) query index, the bootstrap unit; anchors are stored query by query
    n_queries: int
    pos_col: np.ndarray  # (n_anchors,) pool column of each anchor's positive


def build_anchors(
    similarity: Similarity,
    qids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    column: Mapping[str, int],
) -> Anchors:
    """The (query, relevant document) pairs of `qids` (rows of `query_emb`, in that order) as rows of the
    query × pool matrix `similarity` scores; `column` maps a document id to its pool row in `doc_emb`."""
    sim = similarity.scores(query_emb, doc_emb)  # (n_queries, n_pool)
    rows, cols, groups, exclude = [], [], [], []
    for qi, qid in enumerate(qids):
        relevant = [column[d] for d in qrels.get(qid, {})]
        for c in relevant:
            rows.append(qi)
            cols.append(c)
            groups.append(qi)
            exclude.append(relevant)
    rows_arr = np.asarray(rows, dtype=np.int64)
    return Anchors(
        sim=sim[rows_arr],  # (n_anchors, n_pool)
        pos=np.asarray(sim[rows_arr, cols], dtype=np.float64),
        exclude=pad_exclusions(exclude, doc_emb.shape[0]),
        groups=np.asarray(groups),
        n_queries=len(qids),
        pos_col=np.asarray(cols, dtype=np.int64),
    )


def pool_embeddings(
    encoder: Encoder,
    corpus: dict[str, Document],
    doc_ids: list[str] | None,
    doc_embeddings: np.ndarray | None,
) -> np.ndarray:
    """Embeddings of `corpus` in its order, reusing the rows of doc_embeddings given for doc_ids."""
    if doc_ids is None or doc_embeddings is None:
        return encode_corpus(encoder, corpus, show_progress=progress_bars_enabled())[1]
    if len(doc_ids) != len(doc_embeddings):
        raise ConfigError(f"doc_ids has {len(doc_ids)} entries but doc_embeddings {len(doc_embeddings)} rows")
    if list(corpus) == list(doc_ids):
        return np.asarray(doc_embeddings, dtype=np.float32)
    given = {d: i for i, d in enumerate(doc_ids)}
    order = list(corpus)
    out = np.empty((len(order), doc_embeddings.shape[1]), dtype=np.float32)  # (n_pool, dim)
    have = [j for j, d in enumerate(order) if d in given]
    out[have] = doc_embeddings[[given[order[j]] for j in have]]
    missing = [j for j, d in enumerate(order) if d not in given]
    if missing:
        out[missing] = encode_corpus(
            encoder, {order[j]: corpus[order[j]] for j in missing}, show_progress=progress_bars_enabled()
        )[1]
    return out
