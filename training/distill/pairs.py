"""Distillation training text: the split's queries plus corpus pseudo-queries (titles, sentences).

Queries are few, so each document's title and some of its sentences are paired with their own document.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from training.data.retrieval_data import RetrievalData
from training.distill.config import DistillConfig

logger = logging.getLogger(__name__)


@dataclass
class DistillPairs:
    texts: list[str]  # queries and pseudo-queries
    positives: list[int]  # corpus position of each text's positive
    keys: list[str]  # query id (pseudo: "title:<doc>", "sentence:<doc>")
    known: dict[Hashable, set[Hashable]]  # every labelled positive (corpus position) of each key


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


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
        sentences = [s for s in _SENTENCE.split(doc.text) if 4 <= len(s.split()) <= 40]
        # a prefix of one permutation: a larger sentences_per_doc keeps the smaller one's sentences
        for i in sorted(int(j) for j in rng.permutation(len(sentences))[: config.sentences_per_doc]):
            add(f"sentence:{doc.id}", sentences[i], doc.id)
    n_queries = sum(1 for k in pairs.keys if ":" not in k)
    logger.info(
        "distillation pairs: %d from queries, %d pseudo-queries", n_queries, len(pairs.texts) - n_queries
    )
    return pairs


def _pick(docs: list[Any], n: int, rng: np.random.Generator) -> list[Any]:
    if n >= len(docs):
        return docs
    return [docs[int(i)] for i in sorted(rng.choice(len(docs), size=n, replace=False))]
