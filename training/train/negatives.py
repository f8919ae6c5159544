"""Batches and negatives for InfoNCE: no-duplicate batching, random corpus negatives, mined hard negatives.

In-batch negatives are only negatives if no document in the batch is a known positive of another
query in it. `no_duplicate_batches` guarantees that (the idea of sentence-transformers'
NoDuplicatesBatchSampler, made stricter with the qrels). Hard negatives follow the usual recipe for
dense retrievers (e.g. Karpukhin et al. 2020, DPR; Xiong et al. 2021, ANCE): rank the corpus with the
model being trained, skip the very top ranks (unlabelled positives live there) and drop candidates that
score almost as high as the labelled positive (a margin), then sample among the rest.

Mining here is a plain, exact numpy scan in query chunks: scifact-sized corpora (≈5k documents) need
no index, and an exact ranking makes the rank window mean exactly what it says. We do not use
sentence_transformers.util.mine_hard_negatives because it works on text datasets and re-embeds the
corpus, while the trainer already holds the corpus embeddings of its base evaluation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def no_duplicate_batches(
    query_keys: Sequence[Hashable],
    doc_keys: Sequence[Hashable],
    batch_size: int,
    rng: np.random.Generator,
    *,
    positives: dict[Hashable, set[Hashable]] | None = None,
    min_size: int = 2,
    lengths: Sequence[int] | None = None,
    buckets: int = 0,
) -> list[list[int]]:
    """Shuffle pair indices into batches where no query, no positive and no known positive repeats.

    Pair i is (query_keys[i], doc_keys[i]). A pair joins the current batch only if its query and its
    document are new to the batch, its document is not a known positive (`positives[query] = {doc,…}`)
    of a query already there, and no document already there is a known positive of its query. Pairs
    that conflict wait for the next batch, so every pair is used exactly once per epoch, except in
    batches smaller than `min_size` (the tail of an epoch where one query has many positives; a single
    pair has no in-batch negative), which are dropped. `buckets` > 1 with `lengths` (one per pair): each
    batch is drawn from one length quantile (random within it), and the batches are shuffled at the end.
    """
    if len(query_keys) != len(doc_keys):
        raise ValueError("query_keys and doc_keys must have the same length")
    positives = positives or {}
    order = rng.permutation(len(query_keys))
    if buckets > 1 and lengths is not None:
        order = _by_length_bucket(order, lengths, buckets)
    pending = [int(i) for i in order]
    batches: list[list[int]] = []
    while pending:
        batch: list[int] = []
        batch_queries: set[Hashable] = set()
        batch_docs: set[Hashable] = set()
        deferred: list[int] = []
        for i in pending:
            if len(batch) == batch_size:
                deferred.append(i)
                continue
            q, d = query_keys[i], doc_keys[i]
            known = positives.get(q, set())
            clash = (
                q in batch_queries
                or d in batch_docs
                or not known.isdisjoint(batch_docs)
                or any(d in positives.get(other, ()) for other in batch_queries)
            )
            if clash:
                deferred.append(i)
                continue
            batch.append(i)
            batch_queries.add(q)
            batch_docs.add(d)
        batches.append(batch)
        pending = deferred
    kept = [b for b in batches if len(b) >= min_size]
    if buckets > 1 and lengths is not None:  # steps alternate lengths at random, not bucket by bucket
        kept = [kept[int(i)] for i in rng.permutation(len(kept))]
    if len(kept) < len(batches):
        logger.debug("dropped %d batch(es) under %d pairs (no negative)", len(batches) - len(kept), min_size)
    return kept


def _by_length_bucket(order: np.ndarray, lengths: Sequence[int], buckets: int) -> np.ndarray:
    """`order` regrouped by length quantile (shortest bucket first), still shuffled within each bucket."""
    if len(order) < 2:
        return order
    ranks = np.argsort(np.argsort(np.asarray(lengths)[order], kind="stable"), kind="stable")
    return order[np.argsort(ranks * buckets // len(order), kind="stable")]


def random_negatives(
    n_docs: int, n_negatives: int, rng: np.random.Generator, *, exclude: set[int] | None = None
) -> list[int]:
    """n_negatives distinct corpus positions drawn uniformly, never one in `exclude` (batch positives and their
    known positives)."""
    exclude = exclude or set()
    available = n_docs - len(exclude)
    n = min(n_negatives, max(available, 0))
    picked: list[int] = []
    seen: set[int] = set()
    while len(picked) < n:
        for j in rng.integers(0, n_docs, size=2 * (n - len(picked)) + 4):
            j = int(j)
            if j in exclude or j in seen:
                continue
            seen.add(j)
            picked.append(j)
            if len(picked) == n:
                break
    return picked


def top_ranked(scores: np.ndarray, k: int) -> np.ndarray:
    """(c, k) column indices of each row's k highest scores, best first; equal scores in index order.

    A partial selection, then a sort of those k only: for 64 rows of 1M scores and k = 50, 0.3–0.9 s
    against 8.1 s for a full stable argsort (docs/bench-retired.md, top_ranked_bench; bench/training/retrain_scale.py's 1M run spent
    minutes in that sort). Of documents that tie exactly at the k-th score, which make the cut is unspecified.
    """
    k = min(k, scores.shape[1])
    if k == scores.shape[1]:
        return np.argsort(-scores, axis=1, kind="stable")
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]  # (c, k) unordered
    picked = np.take_along_axis(scores, part, axis=1)  # (c, k)
    order = np.lexsort((part, -picked), axis=1)  # by score descending, then index
    return np.take_along_axis(part, order, axis=1)


@dataclass(frozen=True)
class MiningWindow:
    """Where hard negatives are drawn from: up to `n` per pair among the corpus ranks [rank_min, rank_max),
    none scoring above the positive's score − margin (a guard against unlabelled positives)."""

    n: int
    rank_min: int
    rank_max: int
    margin: float

    @classmethod
    def of(cls, config: Any) -> MiningWindow:
        """From a config with the training's `hard_negative*` fields (TrainConfig, DistillConfig)."""
        return cls(
            config.hard_negatives,
            config.hard_negative_rank_min,
            config.hard_negative_rank_max,
            config.hard_negative_margin,
        )


def mine_hard_negatives(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    positive_pos: Sequence[int],
    known_positives: Sequence[set[int]],
    window: MiningWindow,
    *,
    rng: np.random.Generator,
    similarity: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    chunk: int = 256,
) -> list[list[int]]:
    """Up to window.n hard negatives (corpus positions) per training pair.

    query_emb: (P, D) one row per pair; doc_emb: (N, D) corpus; positive_pos[i]: the pair's positive;
    known_positives[i]: every labelled positive of the pair's query. Candidates are the corpus ranks
    [rank_min, rank_max) under `similarity` (default: inner product), minus known positives and minus any
    document scoring above score(positive) − margin. Pairs with fewer survivors get fewer negatives.
    """
    n, rank_min, rank_max, margin = window.n, window.rank_min, window.rank_max, window.margin
    if not 0 <= rank_min < rank_max:
        raise ValueError("need 0 <= rank_min < rank_max")
    similarity = similarity or (lambda a, b: a @ b.T)
    rank_max = min(rank_max, doc_emb.shape[0])
    mined: list[list[int]] = []
    for start in range(0, query_emb.shape[0], chunk):
        scores = similarity(query_emb[start : start + chunk], doc_emb)  # (c, N)
        top = top_ranked(scores, rank_max)  # (c, rank_max) best first
        for row in range(scores.shape[0]):
            i = start + row
            threshold = scores[row, positive_pos[i]] - margin
            ranked = top[row, rank_min:rank_max]  # (≤ rank_max − rank_min,)
            keep = [int(j) for j in ranked if int(j) not in known_positives[i] and scores[row, j] < threshold]
            take = min(n, len(keep))
            mined.append([keep[j] for j in rng.choice(len(keep), size=take, replace=False)] if take else [])
    found = sum(len(m) for m in mined)
    logger.info(
        "mined %d hard negatives for %d pairs (ranks %d–%d, margin %.3f)",
        found,
        len(mined),
        rank_min,
        rank_max,
        margin,
    )
    return mined
