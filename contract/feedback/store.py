"""The judgment store: relevance judgments of one collection, durable and shared by every API replica.

    <bundles>/feedback.sqlite   (+ -wal, -shm)

The same guarantees as the mutation log (contract/mutations/log.py), for the same reasons: SQLite in WAL
mode (one writer at a time, every replica on the folder reads the same rows), `synchronous=FULL` (a batch
the API acknowledged is committed on disk before the answer, so it survives kill -9), one transaction per
batch (all its judgments or none). Unlike the mutation log it is bounded: after each append, rows older
than the retention and, past the row cap, the oldest rows go (judgments are evidence about a model, not
part of the corpus: losing the oldest costs statistical power, never a document).

Each judgment made with a search id also keeps the ids shown above the judged document (`above`): a retrain
takes the ones above a relevant document as its hard negatives (training/feedback/pairs.py). Files made
before that column existed gain it when opened (NULL: nothing recorded).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contract.durable_sqlite import DurableSqlite
from contract.errors import BundleError

logger = logging.getLogger(__name__)

STORE_FILE = "feedback.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS judgments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    query TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    grade INTEGER NOT NULL CHECK (grade BETWEEN 0 AND 3),
    version TEXT,
    mode TEXT,
    rank INTEGER,
    at REAL NOT NULL,
    above TEXT
);
CREATE INDEX IF NOT EXISTS judgments_version ON judgments (version);
"""


class FeedbackStoreError(BundleError):
    """The judgment store is unreadable or unwritable (a corrupt file, a read-only folder)."""

    code = "feedback_store"


@dataclass(frozen=True)
class Judgment:
    """One judgment: `grade` 0 (not relevant) to 3; version, mode and rank from its search id, if any."""

    query: str
    doc_id: str
    grade: int
    version: str | None = None
    mode: str | None = None
    rank: int | None = None
    at: float = 0.0
    seq: int = 0
    above: tuple[str, ...] = ()  # the ids shown above it in that search, best first (with a search id)


class FeedbackStore(DurableSqlite):
    """The judgment file of one bundles folder; safe to share between threads (a connection each). The
    bounds apply when appending; a reader (a retrain job) opens it with `reader`."""

    what = "judgment store"
    error = FeedbackStoreError

    def __init__(self, bundles_dir: str | Path, *, max_rows: int, retention_s: float):
        super().__init__(Path(bundles_dir) / STORE_FILE)
        self.max_rows = max_rows
        self.retention_s = retention_s

    def _prepare(self, con: sqlite3.Connection) -> None:
        con.executescript(SCHEMA)
        columns = {row[1] for row in con.execute("PRAGMA table_info(judgments)")}
        if "above" not in columns:  # a file from before `above` was kept
            con.execute("ALTER TABLE judgments ADD COLUMN above TEXT")

    def append(self, judgments: Sequence[Judgment]) -> tuple[int, int]:
        """One batch in one transaction, then the bounds applied; returns (first seq, last seq)."""
        if not judgments:
            raise FeedbackStoreError("nothing to append")
        now = time.time()
        rows = [
            (
                j.query,
                j.doc_id,
                j.grade,
                j.version,
                j.mode,
                j.rank,
                now,
                json.dumps(list(j.above)) if j.above else None,
            )
            for j in judgments
        ]
        con = self._con()
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.executemany(
                    "INSERT INTO judgments (query, doc_id, grade, version, mode, rank, at, above)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                (last,) = con.execute("SELECT last_insert_rowid()").fetchone()
                con.execute("DELETE FROM judgments WHERE at < ?", (now - self.retention_s,))
                con.execute(
                    "DELETE FROM judgments WHERE seq <= (SELECT MAX(seq) FROM judgments) - ?",
                    (self.max_rows,),
                )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise FeedbackStoreError(f"{self.path.name}: write failed, nothing was stored ({exc})") from exc
        return int(last) - len(rows) + 1, int(last)

    def count(self, version: str | None = None) -> int:
        if not self.path.is_file():
            return 0
        sql, params = "SELECT COUNT(*) FROM judgments", []
        if version is not None:
            sql, params = sql + " WHERE version = ?", [version]
        try:
            (n,) = self._con().execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise FeedbackStoreError(f"{self.path.name}: unreadable ({exc})") from exc
        return int(n)

    def judgments(self, version: str | None = None) -> list[Judgment]:
        """Every judgment kept (of `version` when given), oldest first."""
        if not self.path.is_file():
            return []
        sql = "SELECT query, doc_id, grade, version, mode, rank, at, seq, above FROM judgments"
        params: list[str] = []
        if version is not None:
            sql, params = sql + " WHERE version = ?", [version]
        try:
            rows = self._con().execute(sql + " ORDER BY seq", params).fetchall()
        except sqlite3.Error as exc:
            raise FeedbackStoreError(f"{self.path.name}: unreadable ({exc})") from exc
        return [
            Judgment(q, d, int(g), v, m, r, float(a), int(s), tuple(json.loads(above)) if above else ())
            for q, d, g, v, m, r, a, s, above in rows
        ]

    @classmethod
    def reader(cls, bundles_dir: str | Path) -> FeedbackStore:
        """A handle that only reads: the bounds are the writers' (the API's settings), never applied here."""
        return cls(bundles_dir, max_rows=2**62, retention_s=float("inf"))
