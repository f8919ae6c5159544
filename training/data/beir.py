"""BEIR folder reader, with errors that name file, line and field.

BEIR layout (Thakur et al., 2021):

    <folder>/corpus.jsonl        {"_id" or "id", "title"?, "text", "metadata"?: {...}}
    <folder>/queries.jsonl       {"_id" or "id", "text"}
    <folder>/qrels/<split>.tsv   optional header "query-id<TAB>corpus-id<TAB>score", one judgement a line

Rules the readers enforce (anything else is a `DataError`, never a library stack trace):

- every line is UTF-8 JSON holding one object (blank lines are skipped; a UTF-8 BOM is accepted);
- ids are non-empty strings, unique within their file (a duplicate names both lines);
- a document needs a non-empty title or a non-empty text (an abstract-less paper is still searchable by
  its title); a query needs a non-empty text; `metadata`, when present, is a JSON object;
- a document has no key but `_id`/`id`, `title`, `text` and `metadata`: another one (`"txt"`) is refused,
  naming it, the line and the nearest known field, rather than leaving the field it meant empty;
- a qrel has exactly three tab-separated columns and an integer score, and points at a known query and
  document; judgements with score <= 0 are read (and checked) but not kept as relevant;
- a split must hold at least one relevant pair, and the corpus at least one document.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from contract.config import SPLIT_PATTERN
from contract.errors import DataError
from training.data.line_reader import (
    check_fields,
    check_unique,
    json_objects,
    json_type,
    numbered_lines,
    record_id,
    string_field,
)
from training.data.retrieval_data import Document, RetrievalData

logger = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"
QRELS_HEADER = ("query-id", "corpus-id", "score")
CORPUS_FIELDS = ("_id", "id", "title", "text", "metadata")  # any other key is refused (a typo, not data)


def load_corpus(path: str | Path) -> dict[str, Document]:
    """Read corpus.jsonl into {id: Document}, in file order."""
    path = Path(path)
    corpus: dict[str, Document] = {}
    seen: dict[str, int] = {}
    for lineno, obj in json_objects(path):
        check_fields(
            obj, CORPUS_FIELDS, path, lineno, what="a document", elsewhere=" (other values go in 'metadata')"
        )
        doc_id = record_id(obj, path, lineno)
        check_unique(seen, doc_id, path, lineno, "_id" if "_id" in obj else "id")
        title = string_field(obj, "title", path, lineno, required=False)
        text = string_field(obj, "text", path, lineno, required=False)
        if not title.strip() and not text.strip():
            raise DataError(
                path, "is empty and so is 'title': a document needs one", line=lineno, field="text"
            )
        metadata = obj.get("metadata")
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, dict):
            raise DataError(
                path, f"must be a JSON object, got {json_type(metadata)}", line=lineno, field="metadata"
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
    for lineno, obj in json_objects(path):
        query_id = record_id(obj, path, lineno)
        check_unique(seen, query_id, path, lineno, "_id" if "_id" in obj else "id")
        text = string_field(obj, "text", path, lineno, required=True)
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
    for lineno, line in numbered_lines(path):
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
