"""The one seeded query sampler, and the seeded slice (queries + distractors) built on it."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import replace

from training.data.retrieval_data import RetrievalData


def sample_query_ids(query_ids: Iterable[str], n: int, rng: random.Random) -> set[str]:
    """At most n ids drawn with rng from their sorted order: the draw depends on seed and ids, not file order."""
    ordered = sorted(query_ids)
    return set(rng.sample(ordered, min(n, len(ordered))))


def sample_queries(data: RetrievalData, n: int | None, seed: int) -> RetrievalData:
    """A seeded sample of at most n queries (with their qrels); the corpus stays whole."""
    if n is None or n >= len(data.queries):
        return data
    keep = sample_query_ids(data.queries, n, random.Random(seed))
    return replace(
        data,
        queries={q: t for q, t in data.queries.items() if q in keep},
        qrels={q: r for q, r in data.qrels.items() if q in keep},
    )


def subset(data: RetrievalData, *, n_queries: int, n_distractors: int, seed: int) -> RetrievalData:
    """A seeded slice: n_queries queries with their qrels, their relevant docs, plus n_distractors others.

    Asking for more queries or distractors than exist gives all of them. Corpus order is preserved.
    """
    rng = random.Random(seed)
    chosen = sample_query_ids(data.queries, n_queries, rng)
    relevant = {did for qid in chosen for did in data.qrels.get(qid, {})}
    others = [did for did in data.corpus if did not in relevant]
    distractors = set(rng.sample(others, min(n_distractors, len(others))))
    keep = relevant | distractors
    return RetrievalData(
        corpus={did: doc for did, doc in data.corpus.items() if did in keep},
        queries={qid: text for qid, text in data.queries.items() if qid in chosen},
        qrels={qid: dict(rel) for qid, rel in data.qrels.items() if qid in chosen},
        source=data.source,
    )
