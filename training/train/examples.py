"""What the loop trains on: corpus-title pseudo-pairs, their qrels, per-batch extra negatives (random
and mined hard ones, never a known positive) and the seeded evaluation-query limit."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from contract.config import TrainConfig
from contract.encoding.encoder import Encoder, document_text
from training.data.query_sample import sample_queries
from training.data.retrieval_data import Pair, RetrievalData
from training.eval.embedding_cache import EmbeddingCache
from training.eval.evaluate import EvalResult, encode_corpus
from training.train.negatives import MiningWindow, mine_hard_negatives, random_negatives

logger = logging.getLogger(__name__)


TITLE_QUERY_PREFIX = "title:"  # pseudo-query ids: "title:<doc id>", kept apart from the split's queries


def title_pairs(data: RetrievalData, n: int, rng: np.random.Generator) -> list[Pair]:
    """n seeded corpus documents as (title → body text) pairs: unsupervised in-domain training data.

    The title is a short, on-topic pseudo-query written by the document's authors, in the corpus's own
    vocabulary (the idea behind pseudo-query domain adaptation such as GPL, Wang et al. 2022, with the
    title instead of a generated question). The positive is the body *without* the title, otherwise the
    query would be a substring of its positive and the task trivial. Documents lacking a title or a body
    are skipped; the pairs use no queries and no qrels, only the corpus that gets indexed anyway.
    """
    if n == 0:
        return []
    eligible = [d for d in data.corpus.values() if d.title.strip() and d.text.strip()]
    picked = sorted(int(i) for i in rng.choice(len(eligible), size=min(n, len(eligible)), replace=False))
    pseudo = [
        Pair(
            query=eligible[i].title.strip(),
            positive=document_text(None, eligible[i].text),
            query_id=TITLE_QUERY_PREFIX + eligible[i].id,
            positive_id=eligible[i].id,
        )
        for i in picked
    ]
    clash = next((p.query_id for p in pseudo if p.query_id in data.queries), None)
    if clash is not None:
        raise ValueError(f"corpus_title_pairs: pseudo-query id {clash!r} is also a query id of the split")
    return pseudo


def with_pseudo_qrels(qrels: dict[str, dict[str, int]], pseudo: list[Pair]) -> dict[str, dict[str, int]]:
    """A pseudo-query's only known positive is its own document (it joins batching and mining as a query)."""
    out = dict(qrels)
    for p in pseudo:
        if p.query_id is None or p.positive_id is None:  # title_pairs always sets both
            raise ValueError(f"title pair for {p.query!r} lacks query_id or positive_id")
        out[p.query_id] = {p.positive_id: 1}
    return out


def extra_negatives(
    batch: list[int],
    pairs: list[Any],
    mined: list[list[int]],
    known: dict[str, set[int]],
    position: dict[str, int],
    n_docs: int,
    config: TrainConfig,
    rng: np.random.Generator,
) -> list[int]:
    """Corpus positions shared as negatives by the whole batch: its rows' mined ones plus random ones.

    Nothing here may be a labelled positive of *any* query in the batch (each row sees every extra doc).
    """
    forbidden = {position[pairs[i].positive_id] for i in batch}
    for i in batch:
        forbidden |= known.get(pairs[i].query_id, set())
    extra: list[int] = []
    for i in batch:
        for j in mined[i]:
            if j not in forbidden:
                forbidden.add(j)
                extra.append(j)
    if config.random_negatives:
        extra += random_negatives(n_docs, config.random_negatives, rng, exclude=forbidden)
    return extra


def mining_corpus(
    encoder: Encoder,
    train_data: RetrievalData,
    base: EvalResult,
    *,
    show_progress: bool,
    cache: EmbeddingCache | None = None,
) -> np.ndarray:
    """(N, D) the training corpus as the base model ranks it: the base evaluation's corpus embeddings when
    it is the same corpus (no second encoding), else encoded (through the cache)."""
    if base.doc_ids == list(train_data.corpus):
        return base.doc_embeddings
    return encode_corpus(encoder, train_data.corpus, show_progress=show_progress, cache=cache)[1]


def mine_negatives(
    encoder: Encoder,
    pairs: list[Any],
    doc_emb: np.ndarray,
    position: dict[str, int],
    known: dict[str, set[int]],
    config: TrainConfig,
    rng: np.random.Generator,
) -> list[list[int]]:
    """Hard negatives from the base model's ranking of `doc_emb` (N, D), the corpus in `position` order."""
    query_emb = encoder.encode([p.query for p in pairs], kind="query")  # (P, D)
    return mine_hard_negatives(
        query_emb,
        doc_emb,
        [position[p.positive_id] for p in pairs],
        [known[p.query_id] for p in pairs],
        MiningWindow.of(config),
        rng=rng,
        similarity=encoder.similarity_matrix,
    )


def limit_queries(data: RetrievalData, config: TrainConfig) -> RetrievalData:
    """Seeded subsample of the held-out queries (config.eval_max_queries); the corpus stays whole."""
    return sample_queries(data, config.eval_max_queries, config.seed)


def with_shown_negatives(
    mined: list[list[int]],
    pairs: list[Any],
    shown: dict[str, list[str]],
    position: dict[str, int],
    known: dict[str, set[int]],
) -> list[list[int]]:
    """Each pair's hard negatives with, first, the documents its query was shown above a relevant one
    (relevance feedback, training/feedback/pairs.py), never one of the query's known positives."""
    if not shown:
        return mined
    out = []
    for pair, own in zip(pairs, mined, strict=True):
        ids = shown.get(pair.query_id, [])
        first = [
            position[d] for d in ids if d in position and position[d] not in known.get(pair.query_id, set())
        ]
        out.append(first + [j for j in own if j not in first])
    return out
