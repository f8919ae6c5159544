"""Dataset readers: BEIR folders and plain pairs files, with errors that name file, line and field.

BEIR layout (Thakur et al., 2021):

    <folder>/corpus.jsonl        {"_id" or "id", "title"?, "text", "metadata"?: {...}}
    <folder>/queries.jsonl       {"_id" or "id", "text"}
    <folder>/qrels/<split>.tsv   optional header "query-id<TAB>corpus-id<TAB>score", one judgement a line

Rules the readers enforce (anything else is a `DataError`, never a library stack trace):

- every line is UTF-8 JSON holding one object (blank lines are skipped; a UTF-8 BOM is accepted);
- ids are non-empty strings, unique within their file (a duplicate names both lines);
- a document needs a non-empty title or a non-empty text (an abstract-less paper is still searchable by
  its title); a query needs a non-empty text; `metadata`, when present, is a JSON object;
- a qrel has exactly three tab-separated columns and an integer score, and points at a known query and
  document; judgements with score <= 0 are read (and checked) but not kept as relevant;
- a split must hold at least one relevant pair, and the corpus at least one document.

Users without qrels can give a pairs file (JSONL of {"query", "positive", "negatives"?: [str]});
`pairs_as_retrieval` turns it into train/test `RetrievalData` so the same trainer and evaluator apply.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.config import SPLIT_PATTERN
from contract.encoder import document_text
from contract.errors import DataError

logger = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"
QRELS_HEADER = ("query-id", "corpus-id", "score")


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


@dataclass(frozen=True)
class Pair:
    """One training example."""

    query: str
    positive: str  # document_text(title, text) of the positive
    negatives: tuple[str, ...] = ()
    query_id: str | None = None
    positive_id: str | None = None


# -- line readers --------------------------------------------------------------------------------------
def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line) for each line; bytes are decoded per line to name the bad one."""
    if not path.is_file():
        raise DataError(path, "file not found" if not path.exists() else "is not a regular file")
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                # utf-8-sig on the first line accepts the BOM some editors write
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(path, f"invalid UTF-8 (byte {exc.start} of the line)", line=lineno) from None
            yield lineno, line


def _json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", line=lineno) from None
        except RecursionError:
            raise DataError(path, "invalid JSON: nested too deeply", line=lineno) from None
        if not isinstance(obj, dict):
            raise DataError(path, f"expected a JSON object, got {_json_type(obj)}", line=lineno)
        yield lineno, obj


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _record_id(obj: dict[str, Any], path: Path, lineno: int) -> str:
    key = "_id" if "_id" in obj else "id"
    if key not in obj:
        raise DataError(path, "missing id (expected an '_id' or 'id' key)", line=lineno, field="_id")
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(
            path, f"must be a string, got {_json_type(value)} (quote numeric ids)", line=lineno, field=key
        )
    if not value.strip():
        raise DataError(path, "is empty", line=lineno, field=key)
    return value


def _string(obj: dict[str, Any], key: str, path: Path, lineno: int, *, required: bool) -> str:
    value = obj.get(key)
    if value is None:
        if required:
            raise DataError(path, "is missing", line=lineno, field=key)
        return ""
    if not isinstance(value, str):
        raise DataError(path, f"must be a string, got {_json_type(value)}", line=lineno, field=key)
    return value


def _check_unique(seen: dict[str, int], item_id: str, path: Path, lineno: int, field: str) -> None:
    if item_id in seen:
        raise DataError(
            path, f"duplicate id {item_id!r} (lines {seen[item_id]} and {lineno})", line=lineno, field=field
        )
    seen[item_id] = lineno


# -- BEIR files ----------------------------------------------------------------------------------------
def load_corpus(path: str | Path) -> dict[str, Document]:
    """Read corpus.jsonl into {id: Document}, in file order."""
    path = Path(path)
    corpus: dict[str, Document] = {}
    seen: dict[str, int] = {}
    for lineno, obj in _json_objects(path):
        doc_id = _record_id(obj, path, lineno)
        _check_unique(seen, doc_id, path, lineno, "_id" if "_id" in obj else "id")
        title = _string(obj, "title", path, lineno, required=False)
        text = _string(obj, "text", path, lineno, required=False)
        if not title.strip() and not text.strip():
            raise DataError(
                path, "is empty and so is 'title': a document needs one", line=lineno, field="text"
            )
        metadata = obj.get("metadata")
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, dict):
            raise DataError(
                path, f"must be a JSON object, got {_json_type(metadata)}", line=lineno, field="metadata"
            )
        corpus[doc_id] = Document(id=doc_id, title=title, text=text, metadata=metadata)
    if not corpus:
        raise DataError(path, "the corpus is empty (no documents)")
    return corpus


def load_queries(path: str | Path) -> dict[str, str]:
    """Read queries.jsonl into {id: text}, in file order."""
    path = Path(path)
    queries: dict[str, str] = {}
    seen: dict[str, int] = {}
    for lineno, obj in _json_objects(path):
        query_id = _record_id(obj, path, lineno)
        _check_unique(seen, query_id, path, lineno, "_id" if "_id" in obj else "id")
        text = _string(obj, "text", path, lineno, required=True)
        if not text.strip():
            raise DataError(path, "is empty", line=lineno, field="text")
        queries[query_id] = text
    return queries


def load_qrels(
    path: str | Path,
    *,
    queries: dict[str, str] | None = None,
    corpus: dict[str, Document] | None = None,
) -> dict[str, dict[str, int]]:
    """Read a qrels TSV into {query id: {doc id: score > 0}}; ids are checked when queries/corpus are given."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[tuple[str, str], int] = {}
    for lineno, line in _lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        cols = line.split("\t")
        if lineno == 1 and _is_header(cols):
            continue
        if len(cols) != 3:
            raise DataError(
                path,
                f"expected 3 tab-separated columns (query-id, corpus-id, score), found {len(cols)}",
                line=lineno,
            )
        query_id, doc_id, raw_score = cols
        for name, value in (("query-id", query_id), ("corpus-id", doc_id)):
            if not value.strip():
                raise DataError(path, "is empty", line=lineno, field=name)
        try:
            score = int(raw_score)
        except ValueError:
            raise DataError(
                path, f"must be an integer, got {raw_score!r}", line=lineno, field="score"
            ) from None
        if queries is not None and query_id not in queries:
            raise DataError(
                path, f"unknown query {query_id!r} (not in {QUERIES_FILE})", line=lineno, field="query-id"
            )
        if corpus is not None and doc_id not in corpus:
            raise DataError(
                path, f"unknown document {doc_id!r} (not in {CORPUS_FILE})", line=lineno, field="corpus-id"
            )
        if (query_id, doc_id) in seen:
            raise DataError(
                path,
                f"duplicate judgement for ({query_id!r}, {doc_id!r}) (lines {seen[query_id, doc_id]} and {lineno})",
                line=lineno,
            )
        seen[query_id, doc_id] = lineno
        if score > 0:
            qrels.setdefault(query_id, {})[doc_id] = score
    return qrels


def _is_header(cols: list[str]) -> bool:
    # BEIR writes "query-id corpus-id score"; other tools name the columns differently, but a header's
    # last column is a word, never a number
    names = tuple(c.strip().lower() for c in cols)
    return names == QRELS_HEADER or (len(names) == 3 and names[2].replace("-", "").replace("_", "").isalpha())


def available_splits(folder: str | Path) -> list[str]:
    """Split names that have a qrels/<split>.tsv file in a BEIR folder."""
    qrels_dir = Path(folder) / QRELS_DIR
    return sorted(p.stem for p in qrels_dir.glob("*.tsv")) if qrels_dir.is_dir() else []


def load_beir(folder: str | Path, split: str) -> RetrievalData:
    """Read one split of a BEIR folder; `queries` keeps only those with relevant qrels in the split."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(
            folder,
            f"dataset folder not found (expected a BEIR folder with {CORPUS_FILE}, "
            f"{QUERIES_FILE} and {QRELS_DIR}/<split>.tsv)",
        )
    for name in (CORPUS_FILE, QUERIES_FILE):
        if not (folder / name).is_file():
            raise DataError(
                folder / name, f"file not found (a BEIR folder needs {CORPUS_FILE} and {QUERIES_FILE})"
            )
    if not re.match(SPLIT_PATTERN, split):  # a split is a name joined into a path, never a path itself
        raise DataError(folder / QRELS_DIR, f"split {split!r} is not a split name (letters, digits, _ and -)")
    qrels_path = folder / QRELS_DIR / f"{split}.tsv"
    if not qrels_path.is_file():
        splits = available_splits(folder)
        have = ", ".join(splits) if splits else f"none: {folder / QRELS_DIR} has no .tsv files"
        raise DataError(
            qrels_path, f"file not found: no qrels for split {split!r} (available splits: {have})"
        )
    corpus = load_corpus(folder / CORPUS_FILE)
    all_queries = load_queries(folder / QUERIES_FILE)
    qrels = load_qrels(qrels_path, queries=all_queries, corpus=corpus)
    if not qrels:
        raise DataError(qrels_path, f"split {split!r} has no relevant pairs (no judgement with score > 0)")
    queries = {qid: text for qid, text in all_queries.items() if qid in qrels}
    logger.info(
        "loaded %s split %r: %d docs, %d queries, %d relevant pairs",
        folder,
        split,
        len(corpus),
        len(queries),
        sum(len(r) for r in qrels.values()),
    )
    return RetrievalData(corpus=corpus, queries=queries, qrels=qrels, source=str(folder))


# -- pairs files ---------------------------------------------------------------------------------------
def load_pairs_file(path: str | Path) -> list[Pair]:
    """Read a JSONL pairs file: {"query": str, "positive": str, "negatives"?: [str, ...]} per line."""
    path = Path(path)
    pairs: list[Pair] = []
    for lineno, obj in _json_objects(path):
        query = _string(obj, "query", path, lineno, required=True)
        positive = _string(obj, "positive", path, lineno, required=True)
        for name, value in (("query", query), ("positive", positive)):
            if not value.strip():
                raise DataError(path, "is empty", line=lineno, field=name)
        raw_negatives = obj.get("negatives")
        if raw_negatives is None:
            raw_negatives = []
        if not isinstance(raw_negatives, list):
            raise DataError(
                path,
                f"must be an array of strings, got {_json_type(raw_negatives)}",
                line=lineno,
                field="negatives",
            )
        for i, neg in enumerate(raw_negatives):
            if not isinstance(neg, str) or not neg.strip():
                what = "is empty" if isinstance(neg, str) else f"must be a string, got {_json_type(neg)}"
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


def load_split(
    path: str | Path, split: str, *, holdout_fraction: float = 0.1, seed: int = 0
) -> RetrievalData:
    """A BEIR folder's split, or for a pairs file its "train" or "test" side (`pairs_as_retrieval`)."""
    path = Path(path)
    if path.is_dir():
        return load_beir(path, split)
    if split not in ("train", "test"):
        raise DataError(path, f"a pairs file has only the splits 'train' and 'test', not {split!r}")
    train, test = pairs_as_retrieval(
        load_pairs_file(path), holdout_fraction=holdout_fraction, seed=seed, source=str(path)
    )
    return train if split == "train" else test


# -- views ---------------------------------------------------------------------------------------------
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


def subset(data: RetrievalData, *, n_queries: int, n_distractors: int, seed: int) -> RetrievalData:
    """A seeded slice: n_queries queries with their qrels, their relevant docs, plus n_distractors others.

    Asking for more queries or distractors than exist gives all of them. Corpus order is preserved.
    """
    rng = random.Random(seed)
    query_ids = sorted(data.queries)
    chosen = set(rng.sample(query_ids, min(n_queries, len(query_ids))))
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
