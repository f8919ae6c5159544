"""The dataset types every reader produces and the trainer consumes: Document, RetrievalData, Pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract.encoding.encoder import document_text


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str
    metadata: dict[str, Any]  # free-form JSON object from corpus.jsonl ("metadata" key)


@dataclass
class RetrievalData:
    """One split of a BEIR folder (or of a pairs file turned into one)."""

    corpus: dict[str, Document]  # insertion order = corpus.jsonl order
    queries: dict[str, str]  # only the queries that have relevant qrels in this split
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: relevance > 0}
    source: str  # folder or file it came from
    # query id -> documents shown above a relevant one when a user judged it (training/feedback/pairs.py):
    # that query's hard negatives, never one of its positives; empty for a dataset read from files
    negatives: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Pair:
    """One training example."""

    query: str
    positive: str  # document_text(title, text) of the positive
    negatives: tuple[str, ...] = ()
    query_id: str | None = None
    positive_id: str | None = None


def training_pairs(data: RetrievalData) -> list[Pair]:
    """One Pair per (query, relevant document), sorted by (query id, document id)."""
    return [
        Pair(
            query=data.queries[qid],
            positive=document_text(data.corpus[did].title, data.corpus[did].text),
            query_id=qid,
            positive_id=did,
        )
        for qid in sorted(data.qrels)
        if qid in data.queries
        for did in sorted(data.qrels[qid])
    ]
