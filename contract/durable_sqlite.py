"""A SQLite file that replicas and threads share and whose acknowledged writes are on disk: the mutation log
(contract/mutations/log.py) and the judgment store (contract/feedback/store.py) are both one of these.

A connection per thread (sqlite3 connections are not shared across threads); WAL so readers never block
the writer; synchronous=FULL so a commit is on disk before the API answers (an acknowledged write survives
kill -9 and power loss); autocommit mode so each write names its own transaction.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import ClassVar

BUSY_TIMEOUT_S = 30.0  # a writer waits this long for another replica's write transaction


class DurableSqlite:
    """Subclasses set `what` (named in errors), `error` (raised, from the project's hierarchy) and
    `_prepare` (the schema)."""

    what: ClassVar[str]
    error: ClassVar[type[Exception]]

    def __init__(self, path: Path):
        self.path = path
        self._local = threading.local()

    def _prepare(self, con: sqlite3.Connection) -> None:
        """Create or upgrade the schema on a new connection."""

    def _con(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("PRAGMA synchronous=FULL")  # the commit is on disk before an answer
                self._prepare(con)
            except sqlite3.Error as exc:
                raise self.error(f"{self.path.name}: cannot open the {self.what} ({exc})") from exc
            self._local.con = con
        return con

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None
