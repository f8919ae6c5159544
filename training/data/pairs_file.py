"""Pairs files for users without qrels: JSONL of {"query", "positive", "negatives"?: [str]}.

`pairs_as_retrieval` turns the pairs into train/test `RetrievalData` so the same trainer and evaluator
apply as for a BEIR folder.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from contract.errors import DataError
from training.data.line_reader import json_objects, json_type, string_field
from training.data.retrieval_data import Document, Pair, RetrievalData


def load_pairs_file(path: str | Path) -> list[Pair]:
    """Read a JSONL pairs file: {"query": str, "positive": str, "negatives"?: [str, ...]} per line."""
    path = Path(path)
    pairs: list[Pair] = []
    for lineno, obj in json_objects(path):
        query = string_field(obj, "query", path, lineno, required=True)
        positive = string_field(obj, "positive", path, lineno, required=True)
        for name, value in (("query", query), ("positive", positive)):
            if not value.strip():
                raise DataError(path, "is empty", line=lineno, field=name)
        raw_negatives = obj.get("negatives")
        if raw_negatives is None:
            raw_negatives = []
        if not isinstance(raw_negatives, list):
            raise DataError(
                path,
                f"must be an array of strings, got {json_type(raw_negatives)}",
                line=lineno,
                field="negatives",
            )
        for i, neg in enumerate(raw_negatives):
            if not isinstance(neg, str) or not neg.strip():
                what = "is empty" if isinstance(neg, str) else f"must be a string, got {json_type(neg)}"
                raise DataError(path, what, line=lineno, field=f"negatives[{i}]")
        pairs.append(Pair(query=query, positive=positive, negatives=tuple(raw_negatives)))
    if not pairs:
        raise DataError(path, "no pairs (the file is empty)")
    return pairs


def text_id(text: str, prefix: str) -> str:
    """Deterministic id of a text (same text, same id, on every machine)."""
    return prefix + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def pairs_as_retrieval(
    pairs: list[Pair], *, holdout_fraction: float = 0.1, seed: int = 0, source: str = "pairs"
) -> tuple[RetrievalData, RetrievalData]:
    """Turn pairs into (train, test) RetrievalData sharing one corpus of the unique positive/negative texts.

    Queries (not pairs) are split, so a query's positives are never on both sides. Negatives enter the
    corpus as distractors only.
    """
    if not 0.0 <= holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in [0, 1), got {holdout_fraction}")
    corpus: dict[str, Document] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for pair in pairs:
        qid = text_id(pair.query, "q")
        queries.setdefault(qid, pair.query)
        for text in (pair.positive, *pair.negatives):
            did = text_id(text, "d")
            corpus.setdefault(did, Document(id=did, title="", text=text, metadata={}))
        qrels.setdefault(qid, {})[text_id(pair.positive, "d")] = 1
    query_ids = sorted(queries)
    n_test = round(len(query_ids) * holdout_fraction)
    if holdout_fraction > 0:
        if len(query_ids) < 2:
            raise DataError(
                source, f"needs at least 2 distinct queries to hold some out, found {len(query_ids)}"
            )
        n_test = min(max(n_test, 1), len(query_ids) - 1)
    random.Random(seed).shuffle(query_ids)
    test_ids = set(query_ids[:n_test])

    def side(ids: set[str]) -> RetrievalData:
        return RetrievalData(
            corpus=corpus,
            queries={q: t for q, t in queries.items() if q in ids},
            qrels={q: r for q, r in qrels.items() if q in ids},
            source=source,
        )

    return side(set(query_ids) - test_ids), side(test_ids)
