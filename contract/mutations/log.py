"""The mutation log: single-document upserts and deletes, durable and shared by every API replica.

Contract module: the API appends to it and replays it; the build side folds it into a new bundle
(training/publish/mutation_fold.py). It imports only `contract.errors` and the row types (contract/mutations/rows.py).

    <bundles>/mutations.sqlite   (+ -wal, -shm)   SQLite in WAL mode: one writer at a time, many readers

Every acknowledged write is one committed transaction here before the API answers: a batch of
documents is one transaction (all its rows or none), each row gets its own sequence number `seq`
(AUTOINCREMENT: strictly increasing, never reused). `synchronous=FULL` makes the commit durable before
it returns, so a write the API acknowledged survives kill -9 of that process (and a power loss).

A published bundle records in its manifest (`extras["mutation_seq"]`) the last seq folded into its
corpus; whoever serves it replays only the rows after that. The log is append-only: a rollback to an
older bundle replays from that bundle's seq, so no acknowledged write disappears.

Rows carry the index-space vector of an upsert and the key of the encoder that made it
(`encoder_key`): a replica serving a bundle with the same encoder reuses it, any other re-encodes the
text (a retrain changes the encoder, so its replicas must not mix vectors of two models) and keeps what
it encoded in the `vectors` table, by (seq, encoder key): whoever serves that encoder next (a rollback,
another replica) reads them instead of encoding the log again, so each row is encoded at most once per
encoder (docs/bench-retired.md, activation_bench).

The `replicas` table is where each API process records the state it serves (version, applied seq, delta
size), so GET /bundles on any replica shows every replica's log position.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contract.bundles.bundle import SEQ_KEY, seq_of_manifest
from contract.durable_sqlite import DurableSqlite
from contract.errors import BundleError
from contract.mutations.rows import (
    Mutation,
    NewDocument,
    ReplicaState,
    encoder_key,
    latest_per_document,
)

logger = logging.getLogger(__name__)

# the row types live in contract/mutations/rows.py, the manifest's seq in contract/bundles/bundle.py;
# importable from here as before
__all__ = [
    "SEQ_KEY",
    "Mutation",
    "MutationLog",
    "MutationLogError",
    "NewDocument",
    "ReplicaState",
    "encoder_key",
    "latest_per_document",
    "seq_of_manifest",
]

LOG_FILE = "mutations.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS mutations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    op TEXT NOT NULL CHECK (op IN ('upsert', 'delete')),
    doc_id TEXT NOT NULL,
    title TEXT,
    text TEXT,
    metadata TEXT,
    encoder_key TEXT,
    vector BLOB,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS vectors (
    seq INTEGER NOT NULL,
    encoder_key TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (seq, encoder_key)
);
CREATE TABLE IF NOT EXISTS replicas (
    replica TEXT PRIMARY KEY,
    version TEXT,
    applied_seq INTEGER NOT NULL,
    delta_docs INTEGER NOT NULL,
    tombstones INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
"""


class MutationLogError(BundleError):
    """The mutation log is unreadable or unwritable (a corrupt file, a read-only folder)."""

    code = "mutation_log"


class MutationLog(DurableSqlite):
    """The shared log file of one bundles folder; safe to share between threads (a connection each)."""

    what = "mutation log"
    error = MutationLogError

    def __init__(self, bundles_dir: str | Path):
        super().__init__(Path(bundles_dir) / LOG_FILE)
        self._schema_ready = False

    # -- connections --------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.path.is_file()

    def _prepare(self, con: sqlite3.Connection) -> None:
        if not self._schema_ready:
            con.executescript(SCHEMA)
            self._schema_ready = True

    # -- writing ------------------------------------------------------------------------------------
    def append_upserts(
        self, docs: Sequence[NewDocument], vectors: np.ndarray | None, key: str | None
    ) -> tuple[int, int]:
        """Append one batch in one transaction; returns (first seq, last seq). `vectors`: (n, dim)."""
        if vectors is not None and len(vectors) != len(docs):
            raise MutationLogError(f"{len(docs)} documents but {len(vectors)} vectors")
        now = time.time()
        rows = [
            (
                "upsert",
                d.id,
                d.title,
                d.text,
                json.dumps(d.metadata, ensure_ascii=False),
                key if vectors is not None else None,
                np.ascontiguousarray(vectors[i], dtype=np.float32).tobytes() if vectors is not None else None,
                now,
            )
            for i, d in enumerate(docs)
        ]
        return self._append(rows)

    def store_vectors(self, key: str, vectors: dict[int, np.ndarray]) -> None:
        """Keep vectors of logged upserts made by encoder `key` (one transaction; existing ones stay)."""
        if not vectors:
            return
        rows = [(seq, key, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for seq, v in vectors.items()]
        con = self._con()
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.executemany(
                    "INSERT OR IGNORE INTO vectors (seq, encoder_key, vector) VALUES (?, ?, ?)", rows
                )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: could not keep re-encoded vectors ({exc})") from exc

    def stored_vectors(self, key: str, seqs: Sequence[int]) -> dict[int, np.ndarray]:
        """Vectors of encoder `key` kept for those seqs (`store_vectors`), by seq; missing ones absent."""
        if not seqs or not self.exists():
            return {}
        found: dict[int, np.ndarray] = {}
        try:
            for start in range(0, len(seqs), 500):  # SQLite caps bound parameters per statement
                chunk = list(seqs[start : start + 500])
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT seq, vector FROM vectors WHERE encoder_key = ? AND seq IN ({marks})"
                for seq, blob in self._con().execute(sql, [key, *chunk]):
                    found[int(seq)] = np.frombuffer(blob, dtype=np.float32).copy()
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: unreadable ({exc})") from exc
        return found

    def append_deletes(self, doc_ids: Sequence[str]) -> tuple[int, int]:
        now = time.time()
        return self._append([("delete", i, None, None, None, None, None, now) for i in doc_ids])

    def _append(self, rows: list[tuple[Any, ...]]) -> tuple[int, int]:
        if not rows:
            raise MutationLogError("nothing to append")
        con = self._con()
        try:
            con.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first INSERT
            try:
                con.executemany(
                    "INSERT INTO mutations (op, doc_id, title, text, metadata, encoder_key, vector, at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                (last,) = con.execute("SELECT last_insert_rowid()").fetchone()
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: write failed, nothing was applied ({exc})") from exc
        last = int(last)
        return last - len(rows) + 1, last  # one transaction under the write lock: consecutive seqs

    # -- reading ------------------------------------------------------------------------------------
    def head(self) -> int:
        """The newest seq in the log (0 when it is empty or does not exist yet)."""
        if not self.exists():
            return 0
        try:
            (seq,) = self._con().execute("SELECT COALESCE(MAX(seq), 0) FROM mutations").fetchone()
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: unreadable ({exc})") from exc
        return int(seq)

    def entries(self, after: int, upto: int | None = None, *, limit: int | None = None) -> list[Mutation]:
        """Rows with after < seq <= upto, in seq order (one read transaction: whole batches only)."""
        if not self.exists():
            return []
        sql = "SELECT seq, op, doc_id, title, text, metadata, encoder_key, vector, at FROM mutations"
        sql += " WHERE seq > ?" + (" AND seq <= ?" if upto is not None else "") + " ORDER BY seq"
        params: list[Any] = [after] + ([upto] if upto is not None else [])
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        try:
            rows = self._con().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: unreadable ({exc})") from exc
        return [_mutation(r) for r in rows]

    def last_write(self, doc_id: str, upto: int | None = None) -> Mutation | None:
        """The newest row about `doc_id` (at or before `upto`)."""
        if not self.exists():
            return None
        sql = "SELECT seq, op, doc_id, title, text, metadata, encoder_key, vector, at FROM mutations"
        sql += (
            " WHERE doc_id = ?" + (" AND seq <= ?" if upto is not None else "") + " ORDER BY seq DESC LIMIT 1"
        )
        try:
            row = self._con().execute(sql, [doc_id] + ([upto] if upto is not None else [])).fetchone()
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: unreadable ({exc})") from exc
        return _mutation(row) if row else None

    # -- replicas -----------------------------------------------------------------------------------
    def record_replica(self, state: ReplicaState) -> None:
        con = self._con()
        try:
            con.execute(
                "INSERT INTO replicas VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(replica) DO UPDATE SET "
                "version=excluded.version, applied_seq=excluded.applied_seq, delta_docs=excluded.delta_docs,"
                " tombstones=excluded.tombstones, updated_at=excluded.updated_at",
                (
                    state.replica,
                    state.version,
                    state.applied_seq,
                    state.delta_docs,
                    state.tombstones,
                    state.updated_at,
                ),
            )
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: cannot record replica state ({exc})") from exc

    def replicas(self, seen_within_s: float) -> list[ReplicaState]:
        if not self.exists():
            return []
        try:
            rows = self._con().execute(
                "SELECT replica, version, applied_seq, delta_docs, tombstones, updated_at FROM replicas"
                " WHERE updated_at >= ? ORDER BY replica",
                (time.time() - seen_within_s,),
            )
            return [ReplicaState(*r) for r in rows]
        except sqlite3.Error as exc:
            raise MutationLogError(f"{self.path.name}: unreadable ({exc})") from exc


def _mutation(row: Iterable[Any]) -> Mutation:
    seq, op, doc_id, title, text, metadata, key, blob, at = row
    vector = np.frombuffer(blob, dtype=np.float32).copy() if blob is not None else None
    return Mutation(
        seq=int(seq),
        op=op,
        doc_id=doc_id,
        title=title or "",
        text=text or "",
        metadata=json.loads(metadata) if metadata else {},
        encoder_key=key,
        vector=vector,
        at=float(at),
    )
