"""SQLite document store of a bundle: position → (id, title, text, metadata), plus metadata filters.

Written once when a bundle is built, then only read. Readers open the file read-only (``mode=ro``
URI) with one connection per thread, so concurrent API requests never share a cursor.

Filters (``filter_positions``) are a JSON object of ``field: condition`` pairs combined with AND:

    {"year": 2020}                          equality
    {"lang": {"in": ["en", "de"]}}          in-list
    {"year": {"gte": 2018, "lt": 2022}}     numeric range: gte / lte / gt / lt (may be combined)
    {"source": {"eq": "pubmed"}}            explicit equality

Field names are validated (letters, digits, ``_``, ``-``, dotted paths for nested objects) and only
ever reach SQL as bound JSON paths; values are always bound parameters.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contract.atomic import atomic_path
from contract.errors import BundleDamaged, BundleInvalid, ConfigError

logger = logging.getLogger(__name__)

FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*$")
RANGE_OPS = {"gte": ">=", "lte": "<=", "gt": ">", "lt": "<"}
OPERATORS = ("eq", "in", *RANGE_OPS)
INCLUDE_FIELDS = ("title", "text", "metadata")
MAX_IN_VALUES = 1_000


class FilterError(ConfigError):
    """A metadata filter is malformed (unknown operator, bad field name, wrong value type)."""

    code = "bad_filter"


def write_docstore(path: str | Path, docs: Iterable[Any]) -> Path:
    """Write documents (objects with id, title, text, metadata) in position order; atomic."""
    path = Path(path)
    with atomic_path(path) as tmp:
        _write_rows(tmp, docs)
    return path


def _write_rows(tmp: Path, docs: Iterable[Any]) -> None:
    con = sqlite3.connect(tmp)
    try:
        con.execute(
            "CREATE TABLE docs (position INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL,"
            " text TEXT NOT NULL, metadata TEXT NOT NULL)"
        )
        rows = (
            (i, d.id, d.title or "", d.text or "", json.dumps(d.metadata or {}, ensure_ascii=False))
            for i, d in enumerate(docs)
        )
        con.executemany("INSERT INTO docs VALUES (?, ?, ?, ?, ?)", rows)
        con.commit()
    finally:
        con.close()


class DocStore:
    """Read-only access to docs.sqlite; safe to share between threads.

    Once loaded, a failure to read it (the file truncated or rewritten under a serving bundle) is a
    `BundleDamaged` naming the file relative to the bundles folder, and `on_damage` (set by whoever
    serves it: app/engine/live_bundle.py) hears of it first, so the replica can stop serving it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise BundleInvalid(f"{self.path}: document store is missing")
        self._local = threading.local()
        self.on_damage: Callable[[str], None] | None = None
        try:
            (n,) = self._con().execute("SELECT COUNT(*) FROM docs").fetchone()
        except sqlite3.DatabaseError as exc:
            raise BundleInvalid(f"{self.path}: not a valid document store ({exc})") from exc
        self.count = int(n)

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
            self._local.con = con
        return con

    def __len__(self) -> int:
        return self.count

    def _damaged(self, reason: object) -> BundleDamaged:
        message = f"{self.path.parent.name}/{self.path.name} is damaged ({reason})"
        if self.on_damage is not None:
            self.on_damage(message)
        return BundleDamaged(message)

    def ids(self) -> list[str]:
        try:
            return [r[0] for r in self._con().execute("SELECT id FROM docs ORDER BY position")]
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    def probe(self) -> None:
        """Read the first and the last document (readiness: a truncated file loses its last pages first)."""
        if self.count:
            self.get([0, self.count - 1])

    def get(
        self, positions: Sequence[int] | np.ndarray, include: Sequence[str] = INCLUDE_FIELDS
    ) -> list[dict[str, Any]]:
        """Documents at `positions` in the same order: {"position", "id", and the included fields}."""
        unknown = [f for f in include if f not in INCLUDE_FIELDS]
        if unknown:
            raise ConfigError(f"include: unknown field(s) {unknown} (allowed: {', '.join(INCLUDE_FIELDS)})")
        cols = ", ".join(["position", "id", *include])  # names come from the fixed whitelist above
        pos = [int(p) for p in positions]
        if not pos:
            return []
        found: dict[int, dict[str, Any]] = {}
        try:
            for chunk_start in range(0, len(pos), 500):  # SQLite caps bound parameters per statement
                chunk = pos[chunk_start : chunk_start + 500]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT {cols} FROM docs WHERE position IN ({marks})"
                for row in self._con().execute(sql, chunk):
                    rec = dict(zip(["position", "id", *include], row, strict=True))
                    if "metadata" in rec:
                        rec["metadata"] = json.loads(rec["metadata"])
                    found[rec["position"]] = rec
        except (sqlite3.DatabaseError, ValueError) as exc:  # ValueError: metadata no longer JSON
            raise self._damaged(exc) from None
        missing = [p for p in pos if p not in found]
        if missing:
            raise self._damaged(f"no document at position(s) {missing[:5]}")
        return [found[p] for p in pos]

    def filter_positions(self, filter: Mapping[str, Any]) -> np.ndarray:
        """Sorted int64 positions of the documents whose metadata match every condition."""
        where, params = compile_filter(filter)
        sql = (
            f"SELECT position FROM docs WHERE {where} ORDER BY position"
            if where
            else "SELECT position FROM docs ORDER BY position"
        )
        try:
            return np.fromiter((r[0] for r in self._con().execute(sql, params)), dtype=np.int64)
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


def compile_filter(filter: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """Turn a filter object into a WHERE clause with bound parameters (see module docstring)."""
    if not isinstance(filter, Mapping):
        raise FilterError(f"filter must be a JSON object of field: condition, got {type(filter).__name__}")
    clauses: list[str] = []
    params: list[Any] = []
    for field, cond in filter.items():
        if not isinstance(field, str) or not FIELD_RE.match(field):
            raise FilterError(f"filter field {field!r}: use letters, digits, '_', '-' and '.' for nesting")
        path = "$." + ".".join(f'"{part}"' for part in field.split("."))
        value_sql = "json_extract(metadata, ?)"
        if isinstance(cond, Mapping):
            if not cond:
                raise FilterError(f"filter field {field!r}: empty condition")
            for op, val in cond.items():
                if op == "eq":
                    _check_scalar(field, op, val)
                    clauses.append(f"{value_sql} = ?")
                    params += [path, _sql_value(val)]
                elif op == "in":
                    if not isinstance(val, list) or not val or len(val) > MAX_IN_VALUES:
                        raise FilterError(
                            f"filter field {field!r}: 'in' needs a list of 1..{MAX_IN_VALUES} values"
                        )
                    for v in val:
                        _check_scalar(field, op, v)
                    clauses.append(f"{value_sql} IN ({','.join('?' * len(val))})")
                    params += [path, *(_sql_value(v) for v in val)]
                elif op in RANGE_OPS:
                    if isinstance(val, bool) or not isinstance(val, int | float):
                        raise FilterError(f"filter field {field!r}: '{op}' needs a number, got {val!r}")
                    clauses.append(f"{value_sql} {RANGE_OPS[op]} ?")
                    params += [path, val]
                else:
                    raise FilterError(
                        f"filter field {field!r}: unknown operator {op!r} (allowed: {', '.join(OPERATORS)})"
                    )
        else:
            _check_scalar(field, "eq", cond)
            clauses.append(f"{value_sql} = ?")
            params += [path, _sql_value(cond)]
    return " AND ".join(clauses), params


def _check_scalar(field: str, op: str, val: Any) -> None:
    if not isinstance(val, str | int | float | bool):
        raise FilterError(f"filter field {field!r}: '{op}' needs a string, number or boolean, got {val!r}")


def _sql_value(val: Any) -> Any:
    # json_extract returns JSON true/false as 1/0
    return int(val) if isinstance(val, bool) else val
