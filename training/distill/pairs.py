"""Distillation training text: the split's queries plus corpus pseudo-queries (titles, sentences, spans).

Queries are few, so each document's title, some of its sentences and some word spans of it are paired with
their own document. A span is as long (in words) as a training query drawn at random, so a corpus whose
queries are a few words (package or man-page summaries) gets pseudo-queries of that length, not only the
sentence-long ones that suit claims like scifact's.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.data.pseudo_pairs import SENTENCE_BREAK
from training.data.retrieval_data import RetrievalData
from training.distill.config import DistillConfig

logger = logging.getLogger(__name__)


@dataclass
class DistillPairs:
    texts: list[str]  # queries and pseudo-queries
    positives: list[int]  # corpus position of each text's positive
    keys: list[str]  # query id (pseudo: "title:<doc>", "sentence:<doc>", "span:<doc>")
    known: dict[Hashable, set[Hashable]]  # every labelled positive (corpus position) of each key


def distill_pairs(
    train: RetrievalData, doc_ids: Sequence[str], config: DistillConfig, rng: np.random.Generator
) -> DistillPairs:
    """Training queries (one pair per relevant document in the index) plus titles and sentences."""
    position = {d: i for i, d in enumerate(doc_ids)}
    pairs = DistillPairs([], [], [], {})

    def add(key: str, text: str, doc: str) -> None:
        if text.strip() and doc in position:
            pairs.texts.append(text.strip())
            pairs.positives.append(position[doc])
            pairs.keys.append(key)
            pairs.known.setdefault(key, set()).add(position[doc])

    for qid in sorted(train.qrels):
        for did in sorted(train.qrels[qid]):
            add(qid, train.queries.get(qid, ""), did)
    docs = [d for d in train.corpus.values() if d.id in position]
    for doc in _pick(docs, config.title_queries, rng):
        add(f"title:{doc.id}", doc.title, doc.id)
    for doc in _pick(docs, config.sentence_queries, rng):
        sentences = [s for s in SENTENCE_BREAK.split(doc.text) if 4 <= len(s.split()) <= 40]
        # a prefix of one permutation: a larger sentences_per_doc keeps the smaller one's sentences
        for i in sorted(int(j) for j in rng.permutation(len(sentences))[: config.sentences_per_doc]):
            add(f"sentence:{doc.id}", sentences[i], doc.id)
    if config.span_queries:
        lengths = _query_lengths(train)
        for doc in _pick(docs, config.span_queries, rng):
            words = doc.text.split()
            for _ in range(config.spans_per_doc):
                n = min(len(words), int(rng.choice(lengths)))
                if n >= 2:
                    start = int(rng.integers(0, len(words) - n + 1))
                    add(f"span:{doc.id}", " ".join(words[start : start + n]), doc.id)
    n_queries = sum(1 for k in pairs.keys if ":" not in k)
    logger.info(
        "distillation pairs: %d from queries, %d pseudo-queries", n_queries, len(pairs.texts) - n_queries
    )
    return pairs


def _query_lengths(train: RetrievalData) -> np.ndarray:
    """Word counts of the split's queries (at least 2 words each), or 3..10 when it has none."""
    counts = [max(2, len(q.split())) for q in train.queries.values() if q.strip()]
    return np.asarray(counts or list(range(3, 11)), dtype=np.int64)


def _pick(docs: list[Any], n: int, rng: np.random.Generator) -> list[Any]:
    if n >= len(docs):
        return docs
    return [docs[int(i)] for i in sorted(rng.choice(len(docs), size=n, replace=False))]
