"""Retrieval evaluation: exact (brute-force) search over the whole corpus, metrics from trec_eval.

Metrics come from pytrec_eval (Van Gysel & de Rijke, SIGIR 2018), TREC's own trec_eval, so the numbers
match BEIR's (Thakur et al., 2021) and the published ones:

- ndcg@10: trec_eval `ndcg_cut_10` (gain = relevance grade, log2 discounts, ideal DCG over the best
  min(#relevant, 10) documents);
- mrr@10: trec_eval `recip_rank` on the top-10 run only, i.e. 1/rank of the first relevant document
  within the top 10, else 0;
- recall@k: trec_eval `recall_k`, the share of a query's relevant documents in its top k.

Every metric is a mean over the split's queries; per-query values are kept because the gap report
bootstraps them. trec_eval orders a run by score and breaks exact ties by document id, so tied scores
may be ranked differently from `exact_search`'s (index) order; with float embeddings ties are rare.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytrec_eval
from tqdm.auto import tqdm

from contract.encoding.encoder import Encoder, document_text
from contract.errors import DataError
from training.data.progress import ENCODE_PHASE, report
from training.data.retrieval_data import Document, RetrievalData
from training.eval.embedding_cache import EmbeddingCache

logger = logging.getLogger(__name__)

SimilarityFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (n, d), (m, d) -> (n, m)
MAIN_METRIC = "ndcg@10"
_CHUNK_CELLS = 1 << 24  # query-chunk × corpus score cells held at once (64 MiB of float32)


@dataclass
class EvalResult:
    """Mean metrics of one split, per-query values, and the corpus encoding for reuse."""

    metrics: dict[str, float]  # "ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100"
    n_queries: int
    n_docs: int
    per_query: dict[str, dict[str, float]]  # metric -> {query id: value}, queries in split order
    doc_ids: list[str]  # row i of doc_embeddings is corpus document doc_ids[i]
    doc_embeddings: np.ndarray  # (n_docs, dim) float32, L2-normalised (Encoder.encode output)
    encode_seconds: float = 0.0  # corpus + queries; 0 for what the caller passed in
    search_seconds: float = 0.0

    @property
    def per_query_ndcg(self) -> np.ndarray:
        """(n_queries,) nDCG@10 per query, in split order (for bootstrap confidence intervals)."""
        return np.fromiter(self.per_query[MAIN_METRIC].values(), dtype=np.float64)

    def summary(self) -> dict[str, float | int]:
        """Metrics plus sizes: a flat JSON-ready dict."""
        return {**self.metrics, "n_queries": self.n_queries, "n_docs": self.n_docs}


def exact_search(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    k: int,
    *,
    similarity: SimilarityFn | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force top-k: (scores (n, k) float32, indices (n, k) int64), best first.

    `similarity` defaults to the inner product; pass `Encoder.similarity_matrix` for learned similarities
    (AnInfoNCE). k is capped at the corpus size. Equal scores are ordered by document index.
    """
    query_emb = np.asarray(query_emb, dtype=np.float32)  # (n, d)
    doc_emb = np.asarray(doc_emb, dtype=np.float32)  # (m, d)
    n, m = len(query_emb), len(doc_emb)
    k = min(k, m)
    scores_out = np.empty((n, k), dtype=np.float32)
    index_out = np.empty((n, k), dtype=np.int64)
    if n == 0 or k == 0:
        return scores_out, index_out
    sim = similarity or _inner_product
    chunk = max(1, _CHUNK_CELLS // m)  # bounds the (chunk, m) score block
    for start in range(0, n, chunk):
        block = np.asarray(sim(query_emb[start : start + chunk], doc_emb), dtype=np.float32)  # (c, m)
        if k < m:
            top = np.argpartition(-block, k - 1, axis=1)[:, :k]  # (c, k) unordered
        else:
            top = np.broadcast_to(np.arange(m), block.shape)  # (c, m)
        top_scores = np.take_along_axis(block, top, axis=1)  # (c, k)
        # lexsort: last key is primary -> score descending, then index ascending for exact ties
        order = np.lexsort((top, -top_scores), axis=1)  # (c, k)
        index_out[start : start + len(block)] = np.take_along_axis(top, order, axis=1)
        scores_out[start : start + len(block)] = np.take_along_axis(top_scores, order, axis=1)
    return scores_out, index_out


def _inner_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b.T  # (n, m)


# documents per encoder call, and between two `checkpoint` calls. One call on the whole corpus holds that
# corpus's working set at once: OnnxQueryEncoder tokenises every text in one batch padded to the longest,
# ~34 KB a document on the packages 15k corpus (508 MB at 15k, ~34 GB at 1M; bench/results/
# corpus_encode_scale.txt), and sentence-transformers keeps one tensor per row before stacking them; by
# chunks only the (n, dim) result grows with the corpus.
CHECKPOINT_DOCS = 1024


def encode_corpus(
    encoder: Encoder,
    corpus: dict[str, Document],
    batch_size: int = 32,
    show_progress: bool = True,
    checkpoint: Callable[[], None] | None = None,
    cache: EmbeddingCache | None = None,
) -> tuple[list[str], np.ndarray]:
    """Encode every document as document_text(title, text): (ids in corpus order, (n, dim) float32).

    Encoded CHECKPOINT_DOCS documents at a time into one preallocated matrix, so the memory beyond the
    vectors is one chunk's whatever the corpus size. `checkpoint`, when given, is called before every
    chunk; it aborts the encoding by raising (a job's cancel), so a long corpus never runs to the end
    against the caller's will. `cache`: answer from (and store into) the on-disk embedding cache; a hit is
    memory-mapped, read-only.
    """
    ids = list(corpus)
    texts = [document_text(corpus[i].title, corpus[i].text) for i in ids]
    if cache is not None:
        emb = cache.get_or_compute(
            encoder, texts, lambda: _encode_texts(encoder, texts, batch_size, show_progress, checkpoint)
        )
        return ids, emb  # emb: (n_docs, dim)
    return ids, _encode_texts(encoder, texts, batch_size, show_progress, checkpoint)


def _encode_texts(
    encoder: Encoder,
    texts: list[str],
    batch_size: int,
    show_progress: bool,
    checkpoint: Callable[[], None] | None,
) -> np.ndarray:
    """(n, dim) rows in `texts` order. Chunks are cut from the texts sorted longest first, the order both
    runtimes sort a call's texts in, so every batch pads as it would in one call on the whole corpus."""
    if not texts:
        return encoder.encode([], kind="document")
    order = np.argsort([-len(t) for t in texts], kind="stable")  # (n,)
    out: np.ndarray | None = None
    with tqdm(total=len(texts), desc="encoding documents", unit="doc", disable=not show_progress) as bar:
        for start in range(0, len(texts), CHECKPOINT_DOCS):
            if checkpoint is not None:
                checkpoint()
            rows = order[start : start + CHECKPOINT_DOCS]
            block = encoder.encode([texts[i] for i in rows], kind="document", batch_size=batch_size)
            if out is None:  # the width is the document tower's: known once it has encoded
                out = np.empty((len(texts), block.shape[1]), dtype=np.float32)  # (n, dim)
            out[rows] = block  # (chunk, dim)
            bar.update(len(rows))
            report(ENCODE_PHASE, bar.n, len(texts))
    assert out is not None
    return out


def trec_metrics(
    qrels: dict[str, dict[str, int]],
    trec_run: dict[str, dict[str, float]],
    k_values: Sequence[int] = (1, 10, 100),
) -> dict[str, dict[str, float]]:
    """Per-query metrics from trec_eval: {metric name: {query id: value}}, for the queries in `trec_run`.

    `trec_run` (a TREC run) maps query id -> {doc id: score}; it should hold at least the top max(k_values, 10) documents.
    """
    recall = "recall." + ",".join(str(k) for k in sorted(set(k_values)))
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", recall}).evaluate(trec_run)
    top10 = {
        q: dict(sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))[:10]) for q, docs in trec_run.items()
    }
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    per_query: dict[str, dict[str, float]] = {"ndcg@10": {}, "mrr@10": {}}
    per_query.update({f"recall@{k}": {} for k in sorted(set(k_values))})
    for qid in trec_run:
        values = full.get(qid, {})
        per_query["ndcg@10"][qid] = float(values.get("ndcg_cut_10", 0.0))
        per_query["mrr@10"][qid] = float(rr.get(qid, {}).get("recip_rank", 0.0))
        for k in sorted(set(k_values)):
            per_query[f"recall@{k}"][qid] = float(values.get(f"recall_{k}", 0.0))
    return per_query


def evaluate(
    encoder: Encoder,
    data: RetrievalData,
    *,
    doc_embeddings: np.ndarray | None = None,
    query_embeddings: np.ndarray | None = None,
    k_values: Sequence[int] = (1, 10, 100),
    batch_size: int = 32,
    show_progress: bool = True,
    cache: EmbeddingCache | None = None,
) -> EvalResult:
    """Rank the whole corpus for every query of `data` by exact search and score it with trec_eval.

    `doc_embeddings` (rows in corpus order, as returned in `EvalResult.doc_embeddings`) skips the costly
    corpus encoding when the same model is evaluated again; `query_embeddings` rows follow data.queries.
    `cache`: the on-disk embedding cache for the corpus encoding (see training.eval.embedding_cache).
    """
    if not data.queries:
        raise DataError(data.source, "no queries to evaluate")
    if not data.corpus:
        raise DataError(data.source, "no documents to evaluate against")
    doc_ids = list(data.corpus)
    query_ids = list(data.queries)
    t0 = time.perf_counter()
    doc_embeddings = _corpus_embeddings(encoder, data, doc_embeddings, batch_size, show_progress, cache)
    query_embeddings = _query_embeddings(encoder, data, query_embeddings, batch_size)
    t1 = time.perf_counter()

    trec_run = _ranked_run(
        encoder, query_embeddings, doc_embeddings, doc_ids, query_ids, k_values, show_progress
    )
    qrels = {qid: data.qrels.get(qid, {}) for qid in query_ids}
    per_query = trec_metrics(qrels, trec_run, k_values)
    t2 = time.perf_counter()

    metrics = {name: float(np.mean(list(values.values()))) for name, values in per_query.items()}
    logger.info(
        "evaluated %d queries over %d docs in %.1fs (encode %.1fs): %s",
        len(query_ids),
        len(doc_ids),
        t2 - t0,
        t1 - t0,
        ", ".join(f"{name} {value:.4f}" for name, value in metrics.items()),
    )
    return EvalResult(
        metrics=metrics,
        n_queries=len(query_ids),
        n_docs=len(doc_ids),
        per_query=per_query,
        doc_ids=doc_ids,
        doc_embeddings=doc_embeddings,
        encode_seconds=t1 - t0,
        search_seconds=t2 - t1,
    )


def _corpus_embeddings(
    encoder: Encoder,
    data: RetrievalData,
    given: np.ndarray | None,
    batch_size: int,
    show_progress: bool,
    cache: EmbeddingCache | None,
) -> np.ndarray:
    """The corpus rows in corpus order: `given` when its row count fits, else encoded (through `cache`)."""
    if given is None:
        _, encoded = encode_corpus(encoder, data.corpus, batch_size, show_progress, cache=cache)
        return encoded
    if given.shape[0] != len(data.corpus):
        raise ValueError(f"doc_embeddings has {given.shape[0]} rows, the corpus {len(data.corpus)} documents")
    return given


def _query_embeddings(
    encoder: Encoder, data: RetrievalData, given: np.ndarray | None, batch_size: int
) -> np.ndarray:
    """The query rows in data.queries order: `given` when its row count fits, else encoded."""
    if given is None:
        texts = list(data.queries.values())
        return encoder.encode(texts, kind="query", batch_size=batch_size, show_progress=False)
    if given.shape[0] != len(data.queries):
        raise ValueError(f"query_embeddings has {given.shape[0]} rows, the split {len(data.queries)} queries")
    return given


def _ranked_run(
    encoder: Encoder,
    query_embeddings: np.ndarray,
    doc_embeddings: np.ndarray,
    doc_ids: list[str],
    query_ids: list[str],
    k_values: Sequence[int],
    show_progress: bool,
) -> dict[str, dict[str, float]]:
    """pytrec_eval's run: the top max(k_values, 10) documents of each query by exact search, with scores."""
    depth = max(max(k_values), 10)
    scores, indices = exact_search(
        query_embeddings, doc_embeddings, depth, similarity=encoder.similarity_matrix
    )
    return {
        qid: {doc_ids[j]: float(s) for j, s in zip(indices[row], scores[row], strict=True)}
        for row, qid in enumerate(tqdm(query_ids, desc="rank", disable=not show_progress, leave=False))
    }
