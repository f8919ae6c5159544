"""Job records: what the API and the CLI show about a job, kept outside the task queue.

huey only knows "a message is waiting"; everything a user asks about a job (state, progress, log tail,
published version, gate decision, error) lives here, so it survives API and worker restarts.

Two stores behind one interface, chosen by the same URL as the queue:

- `sqlite:///path/jobs.db` → a table in `path/jobs.records.db` (beside huey's own file);
- `redis://host:port/db`   → one Redis hash per job (`<ns>:job:<id>`) plus a sorted set listing them, so
  an API on another machine sees the records the workers write.

Every write is a compare-and-set read-modify-write of the whole record inside one transaction (SQLite
`BEGIN IMMEDIATE`; Redis `WATCH`/`MULTI`), so a cancel racing a worker's "running" update never loses
either; `expect=` makes a state transition conditional.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from contract.defaults import DEFAULT_COLLECTION
from contract.errors import JobNotFound

logger = logging.getLogger(__name__)

JobType = Literal["retrain", "reindex"]
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
LOG_TAIL_LINES = 40
# how often a running task stamps `heartbeat_at`, unless the worker's --progress-interval-s says otherwise
HEARTBEAT_INTERVAL_S = 2.0


NOT_STARTED = "not started"  # the phase of a job cancelled while queued


class Progress(BaseModel):
    """Where a job is: its current phase and, when the phase is counted, how far through it."""

    phase: str = Field(
        "queued",
        description="The phase running now (train, encode corpus, index + bundle, distill static query "
        "encoder, publish, …), or the end state once finished.",
    )
    step: int = Field(0, description="Units of the phase done (steps, documents).")
    total_steps: int | None = Field(None, description="Units the phase has; null when it is not counted.")
    fraction: float | None = Field(
        None, description="step / total_steps of the current phase (0 to 1); null when it is not counted."
    )
    phase_started_at: float | None = Field(None, description="When the current phase began (Unix seconds).")
    epoch: int | None = None
    loss: float | None = None
    temperature: float | None = None
    eta_s: float | None = Field(
        None, description="Seconds left in the current phase at its rate so far; null until it can be told."
    )
    budget_s: float | None = None  # a retrain's time_budget_s, beside its ETA (None: no budget)


class JobRecord(BaseModel):
    """One job. Timestamps are Unix seconds (UTC)."""

    id: str
    type: JobType
    dataset: str  # the name under the data root, as submitted
    options: dict[str, Any] = Field(default_factory=dict)
    data_dir: str  # resolved dataset path the worker reads
    bundles_dir: (
        str  # bundle folder the job publishes into: its collection's (contract/bundles/collections.py)
    )
    collection: str = (
        DEFAULT_COLLECTION  # the collection it publishes into (records from before collections: default)
    )
    data_root: str | None = None  # the root data_dir was confined to; the worker re-checks under it
    models_root: str | None = None  # the root options.base_model names a folder under
    state: JobState = "queued"
    progress: Progress = Field(default_factory=Progress)
    log_tail: list[str] = Field(default_factory=list)
    bundle_version: str | None = None  # the candidate bundle this job built
    live: bool | None = None  # gate decision: did the candidate become CURRENT?
    gate_reason: str | None = None
    # what a retrain trained: full, or query (a query-side retrain), as its manifest's plan says
    retrain_scope: str | None = None
    tower: str | None = None  # retrain_scope's old name, still written for records' older readers
    scope_reason: str | None = None  # why that scope (what `auto` saw, or "asked for")
    # a retrain's relevance judgments: use resolved and why, pairs, held-out slice and its nDCG@10 (candidate
    # and live), as training/feedback/use.py records them
    feedback: dict[str, Any] | None = None
    reason: str | None = None  # why it was submitted, when not by a person (the drift trigger)
    error: str | None = None
    cancel_requested: bool = False
    worker: str | None = None  # host:pid of the process running it
    heartbeat_at: float | None = None
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to finish (a finished job), or so far (a running one)."""
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    def stale(self, timeout_s: float, now: float | None = None) -> bool:
        """A running (or claimed, lock-waiting) job whose worker stopped stamping its heartbeat."""
        if self.state not in ("queued", "running") or self.worker is None:
            return False
        beat = self.heartbeat_at or self.started_at or self.created_at
        return (now or time.time()) - beat > timeout_s

    def as_seen(self, timeout_s: float) -> JobRecord:
        """The record as a reader should report it: a stale running job reads as failed."""
        if not self.stale(timeout_s):
            return self
        return self.model_copy(
            update={
                "state": "failed",
                "error": f"worker died: heartbeat expired (no heartbeat for {timeout_s:g} s)",
            }
        )


class WorkerBeat(BaseModel):
    """A worker process's own heartbeat, stamped while it runs (idle or busy)."""

    id: str  # host:pid
    started_at: float
    heartbeat_at: float
    alive: bool | None = None  # filled in by readers: heartbeat younger than their timeout


Mutator = Callable[[JobRecord], JobRecord | None]
WORKER_FORGET_S = 86_400.0  # workers silent for a day are dropped from the list


class RecordStore(Protocol):
    def create(self, record: JobRecord) -> None: ...
    def get(self, job_id: str) -> JobRecord: ...
    def recent(self, limit: int = 100) -> list[JobRecord]: ...
    def mutate(self, job_id: str, fn: Mutator) -> JobRecord | None: ...
    def beat_worker(self, beat: WorkerBeat) -> None: ...
    def workers(self) -> list[WorkerBeat]: ...
    def close(self) -> None: ...


def update(
    store: RecordStore, job_id: str, *, expect: Collection[str] | None = None, **fields: Any
) -> JobRecord | None:
    """Set `fields` atomically; with `expect`, only if the current state is one of those (else None)."""

    def fn(record: JobRecord) -> JobRecord | None:
        if expect is not None and record.state not in expect:
            return None
        return record.model_copy(update=fields)

    return store.mutate(job_id, fn)


def append_log(store: RecordStore, job_id: str, lines: list[str]) -> None:
    def fn(record: JobRecord) -> JobRecord:
        return record.model_copy(update={"log_tail": (record.log_tail + lines)[-LOG_TAIL_LINES:]})

    store.mutate(job_id, fn)


def open_records(url: str) -> RecordStore:
    """The record store that goes with a queue URL (see module docstring)."""
    if url.startswith("sqlite:///"):
        queue_db = Path(url.removeprefix("sqlite:///"))
        return SqliteRecords(queue_db.with_name(queue_db.stem + ".records.db"))
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisRecords(url)
    raise ValueError(f"queue URL {url!r}: expected sqlite:///path/jobs.db or redis://host:port/db")


class SqliteRecords:
    """Records in one SQLite table (WAL: readers never block the worker's writes)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()  # sqlite3 connections are per thread
        self._opened: list[sqlite3.Connection] = []  # every thread's connection, so close() reaches all
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS job (id TEXT PRIMARY KEY, created_at REAL NOT NULL, doc TEXT NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS worker (id TEXT PRIMARY KEY, doc TEXT NOT NULL, beat REAL NOT NULL)"
            )

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # still one per thread: check_same_thread=False only lets close() end them all
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            self._opened.append(conn)  # list.append is atomic: threads never lose one
        return conn

    def close(self) -> None:
        """Close every thread's connection (the API's lifespan ends); a later call opens a new one."""
        opened, self._opened, self._local = self._opened, [], threading.local()
        for conn in opened:
            conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def create(self, record: JobRecord) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO job (id, created_at, doc) VALUES (?, ?, ?)",
                (record.id, record.created_at, record.model_dump_json()),
            )

    def get(self, job_id: str) -> JobRecord:
        row = self._conn().execute("SELECT doc FROM job WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return JobRecord.model_validate_json(row[0])

    def recent(self, limit: int = 100) -> list[JobRecord]:
        rows = (
            self._conn().execute("SELECT doc FROM job ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        )
        return [JobRecord.model_validate_json(doc) for (doc,) in rows]

    def mutate(self, job_id: str, fn: Mutator) -> JobRecord | None:
        with self._tx() as db:
            row = db.execute("SELECT doc FROM job WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(f"no job with id {job_id!r}")
            new = fn(JobRecord.model_validate_json(row[0]))
            if new is not None:
                db.execute("UPDATE job SET doc = ? WHERE id = ?", (new.model_dump_json(), job_id))
            return new

    def beat_worker(self, beat: WorkerBeat) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO worker (id, doc, beat) VALUES (?, ?, ?)",
                (beat.id, beat.model_dump_json(), beat.heartbeat_at),
            )
            db.execute("DELETE FROM worker WHERE beat < ?", (beat.heartbeat_at - WORKER_FORGET_S,))

    def workers(self) -> list[WorkerBeat]:
        rows = self._conn().execute("SELECT doc FROM worker ORDER BY beat DESC").fetchall()
        return [WorkerBeat.model_validate_json(doc) for (doc,) in rows]


class RedisRecords:
    """Records as Redis hashes (`doc` = the JSON record, `state` for humans using redis-cli)."""

    def __init__(self, url: str, namespace: str = "infonce-search"):
        import redis

        self._redis = redis.Redis.from_url(url)
        self._watch_error = redis.WatchError
        self._ns = namespace
        self._index = f"{namespace}:jobs"
        self._workers = f"{namespace}:workers"

    def _key(self, job_id: str) -> str:
        return f"{self._ns}:job:{job_id}"

    def close(self) -> None:
        self._redis.close()

    def create(self, record: JobRecord) -> None:
        with self._redis.pipeline() as pipe:  # MULTI/EXEC: the hash and the index appear together
            pipe.hset(self._key(record.id), mapping={"doc": record.model_dump_json(), "state": record.state})
            pipe.zadd(self._index, {record.id: record.created_at})
            pipe.execute()

    def get(self, job_id: str) -> JobRecord:
        doc = self._redis.hget(self._key(job_id), "doc")
        if doc is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return JobRecord.model_validate_json(doc)

    def recent(self, limit: int = 100) -> list[JobRecord]:
        ids: list[bytes] = list(self._redis.zrevrange(self._index, 0, limit - 1))  # type: ignore[arg-type]
        with self._redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hget(self._key(job_id.decode()), "doc")
            docs = pipe.execute()
        return [JobRecord.model_validate_json(doc) for doc in docs if doc is not None]

    def mutate(self, job_id: str, fn: Mutator) -> JobRecord | None:
        key = self._key(job_id)
        with self._redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    doc = pipe.hget(key, "doc")
                    if doc is None:
                        raise JobNotFound(f"no job with id {job_id!r}")
                    new = fn(JobRecord.model_validate_json(doc))
                    if new is None:
                        pipe.unwatch()
                        return None
                    pipe.multi()
                    pipe.hset(key, mapping={"doc": new.model_dump_json(), "state": new.state})
                    pipe.execute()
                    return new
                except self._watch_error:
                    continue  # someone wrote between WATCH and EXEC: re-read and re-apply

    def beat_worker(self, beat: WorkerBeat) -> None:
        with self._redis.pipeline() as pipe:
            pipe.hset(self._workers, beat.id, beat.model_dump_json())
            for worker_id, doc in self._redis.hgetall(self._workers).items():
                if WorkerBeat.model_validate_json(doc).heartbeat_at < beat.heartbeat_at - WORKER_FORGET_S:
                    pipe.hdel(self._workers, worker_id)
            pipe.execute()

    def workers(self) -> list[WorkerBeat]:
        docs = self._redis.hgetall(self._workers).values()
        return sorted((WorkerBeat.model_validate_json(d) for d in docs), key=lambda w: -w.heartbeat_at)
