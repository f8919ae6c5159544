"""Files of relevance judgments for `python -m training feedback` (issue 41): JSONL or TSV, one judgment a
line, checked whole before anything is sent, every error naming the file, the line and the field.

JSONL: {"query": str, "document_id": str, "relevant": true/false or 0-3, "search_id"?: str}.
TSV:   query <TAB> document_id <TAB> relevant [<TAB> search_id], relevant as true/false or 0-3; a first
       line "query<TAB>document_id<TAB>relevant…" is a header and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.errors import DataError
from training.data.line_reader import check_fields, json_objects, json_type, numbered_lines, string_field

FIELDS = ("query", "document_id", "relevant", "search_id")
MAX_GRADE = 3  # TREC's graded scale 0-3, as POST /feedback takes it (app/schemas/feedback.py)


@dataclass(frozen=True)
class JudgmentLine:
    """One judgment and the line it came from (to name it when the server refuses it)."""

    line: int
    query: str
    document_id: str
    relevant: bool | int
    search_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.query,
            "document_id": self.document_id,
            "relevant": self.relevant,
        }
        if self.search_id is not None:
            out["search_id"] = self.search_id
        return out


def load_judgments(path: str | Path) -> list[JudgmentLine]:
    """Every judgment of a .tsv file (by its suffix) or a JSONL file (any other)."""
    path = Path(path)
    rows = _tsv(path) if path.suffix.lower() in (".tsv", ".tab") else _jsonl(path)
    if not rows:
        raise DataError(path, "no judgments (the file is empty)")
    return rows


def _jsonl(path: Path) -> list[JudgmentLine]:
    rows = []
    for lineno, obj in json_objects(path):
        check_fields(obj, FIELDS, path, lineno, what="a judgment")
        query = _text(string_field(obj, "query", path, lineno, required=True), "query", path, lineno)
        doc = _text(
            string_field(obj, "document_id", path, lineno, required=True), "document_id", path, lineno
        )
        if "relevant" not in obj:
            raise DataError(path, "is missing (true/false or a grade 0-3)", line=lineno, field="relevant")
        relevant = _grade(obj["relevant"], path, lineno)
        sid = string_field(obj, "search_id", path, lineno, required=False) or None
        rows.append(JudgmentLine(lineno, query, doc, relevant, sid))
    return rows


def _tsv(path: Path) -> list[JudgmentLine]:
    rows = []
    for lineno, line in numbered_lines(path):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        cells = text.split("\t")
        if lineno == 1 and cells[:2] == ["query", "document_id"]:
            continue  # a header
        if not 3 <= len(cells) <= 4:
            raise DataError(
                path,
                f"expected 3 or 4 tab-separated columns (query, document_id, relevant[, search_id]), got {len(cells)}",
                line=lineno,
            )
        query = _text(cells[0], "query", path, lineno)
        doc = _text(cells[1], "document_id", path, lineno)
        raw = cells[2].strip().lower()
        value: Any = {"true": True, "false": False}.get(raw, raw)
        if isinstance(value, str):
            value = int(value) if value.isdigit() else value
        sid = cells[3].strip() if len(cells) == 4 and cells[3].strip() else None
        rows.append(JudgmentLine(lineno, query, doc, _grade(value, path, lineno), sid))
    return rows


def _text(value: str, field: str, path: Path, lineno: int) -> str:
    if not value.strip():
        raise DataError(path, "is empty", line=lineno, field=field)
    return value


def _grade(value: Any, path: Path, lineno: int) -> bool | int:
    if isinstance(value, bool) or (isinstance(value, int) and 0 <= value <= MAX_GRADE):
        return value
    got = repr(value) if isinstance(value, str | int) else json_type(value)
    raise DataError(
        path, f"must be true, false or a grade 0-{MAX_GRADE}, got {got}", line=lineno, field="relevant"
    )
