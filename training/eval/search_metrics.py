"""nDCG@10 and recall@10 of given query vectors, searched the way they will be served: through a built
index (a bundle's FAISS or Milvus index, in the model's index space), or exactly by the model's similarity.

One definition for every caller that scores query encoders against fixed document vectors: the ONNX
export's quality check (training.export.onnx_export) and the distilled query encoders
(training.distill.bundle_step)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from contract.encoding.similarity import Similarity
from training.eval.evaluate import exact_search, trec_metrics

SEARCH_DEPTH = 100  # documents ranked per query: the run trec_eval scores
SCORED = ("ndcg@10", "recall@10")


def search_metrics(
    similarity: Similarity,
    query_emb: np.ndarray,
    qids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    *,
    index: Any = None,
    doc_embeddings: np.ndarray | None = None,
) -> dict[str, float]:
    """Mean trec_eval nDCG@10 and recall@10 (6 decimals) of normalised query vectors (n, D), row i for
    qids[i], over the top SEARCH_DEPTH documents.

    Give `index` (rows are positions into `doc_ids`; searched with `similarity.to_index_space` queries,
    exactly as the API does) or `doc_embeddings` (normalised rows, row i = doc_ids[i]; exact search by
    `similarity.scores`)."""
    if not qids:
        return dict.fromkeys(SCORED, 0.0)
    per_query = per_query_metrics(
        similarity, query_emb, qids, qrels, doc_ids, index=index, doc_embeddings=doc_embeddings
    )
    return {m: round(float(np.mean(list(per_query[m].values()))), 6) for m in SCORED}


def per_query_metrics(
    similarity: Similarity,
    query_emb: np.ndarray,
    qids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    *,
    index: Any = None,
    doc_embeddings: np.ndarray | None = None,
) -> dict[str, dict[str, float]]:
    """{metric: {qid: value}} for SCORED, searched as `search_metrics` does (its arguments)."""
    if (index is None) == (doc_embeddings is None):
        raise ValueError("give exactly one of index and doc_embeddings")
    if doc_embeddings is None:
        rows = index.search(similarity.to_index_space(query_emb), SEARCH_DEPTH)
    else:
        scores, idx = exact_search(query_emb, doc_embeddings, SEARCH_DEPTH, similarity=similarity.scores)
        rows = list(zip(idx, scores, strict=True))
    trec_run = {
        q: {doc_ids[int(j)]: float(s) for j, s in zip(*rows[r], strict=True)} for r, q in enumerate(qids)
    }
    per_query = trec_metrics({q: dict(qrels[q]) for q in qids}, trec_run, k_values=(10,))
    return {m: {q: float(per_query[m].get(q, 0.0)) for q in qids} for m in SCORED}
