"""The worker process: huey's consumer running `run_job`, plus dead-job recovery.

`python -m training worker --queue URL` starts huey's own Consumer (threads; `--workers N` of them). Jobs
for the same bundles folder still run one at a time (the lock in tasks.py); more workers only help
when they serve several bundles folders.

A job whose worker died (kill -9, OOM, host lost) would stay `running` forever, and its huey message is
already consumed. Two rules turn it into `failed` so it can be resubmitted:

- on start, jobs claimed by a process of this host that no longer exists (or by our own pid: a
  container restart reuses pid 1) are failed with "worker died: worker restarted";
- while running, a heartbeat thread stamps the worker's own record (GET /jobs lists live workers) and
  fails any claimed job whose heartbeat is older than the timeout
  ("worker died: heartbeat expired"), whichever worker wrote it. Readers (API, CLI) apply the same rule
  on the fly, so a stale job reads as failed even when no worker is running.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

from huey.consumer import Consumer

from contract.bundles.folder import BundleFolder, VersionInfo
from contract.jobs.queue import DEFAULT_HEARTBEAT_TIMEOUT_S, open_huey
from contract.jobs.records import (
    HEARTBEAT_INTERVAL_S,
    JobRecord,
    RecordStore,
    WorkerBeat,
    open_records,
    update,
)

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 5.0  # worker heartbeat and dead-job sweep period
# a job's heartbeat may be late by a write or two (a busy SQLite file) before the timeout fails it
BEATS_PER_TIMEOUT = 3
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class _Consumer(Consumer):
    """huey's Consumer, but a stop signal during start-up is held until huey's handlers are in place.

    huey starts its threads first and installs its SIGINT/SIGTERM handlers last, so a Ctrl-C in between
    lands in Python's default handler halfway through start-up. Blocked, the signal stays pending and
    reaches huey's graceful handler the moment it is unblocked, and "consuming" is logged only then, so
    whoever waits for that line can stop the worker at once. (tests/test_log_setup.py, which sends SIGINT
    on that line, once saw a worker not stop within 30 s; not reproduced in 60 further tries, so this
    closes the window it could have come from rather than a proven cause.)
    """

    def __init__(self, huey: object, ready_message: str, **options: object) -> None:
        super().__init__(huey, **options)
        self._ready_message = ready_message

    def start(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        logger.info(self._ready_message)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _death_reason(record: JobRecord, *, host: str, at_start: bool, timeout_s: float) -> str | None:
    if record.state not in ("queued", "running") or record.worker is None:
        return None
    worker_host, _, pid = record.worker.rpartition(":")
    mine = at_start and worker_host == host and pid.isdigit()
    if mine and (int(pid) == os.getpid() or not _pid_alive(int(pid))):
        return f"worker died: worker restarted (process {record.worker} is gone)"
    if record.stale(timeout_s):
        return f"worker died: heartbeat expired (no heartbeat for {timeout_s:g} s)"
    return None


def _published_by(record: JobRecord, until: float) -> VersionInfo | None:
    """The version a job published before its worker died, if any: the gate decided on it while the job
    ran. Jobs of one collection never overlap (they hold its lock), so a version whose gate decision falls
    in the job's run is the job's own; the latest one if several."""
    if record.bundle_version is not None or record.started_at is None:
        return None
    try:
        versions = BundleFolder(record.bundles_dir).list_versions()
    except OSError:  # the folder is gone (a deleted collection): nothing to reconcile
        return None
    ran = [
        v
        for v in versions
        if v.gate is not None and record.started_at <= v.gate.decided_at.timestamp() <= until
    ]
    return max(ran, key=lambda v: v.gate.decided_at if v.gate else v.created_at, default=None)


def _end_state(record: JobRecord, reason: str, until: float) -> dict[str, object]:
    """What a dead job's record becomes: failed, unless it had already published its bundle (killed after
    the version went live, before it could write its outcome): then succeeded with that version, as
    CURRENT says, and why the record was mended (issue 43, item 6)."""
    published = _published_by(record, until)
    if published is None:
        return {"state": "failed", "error": reason}
    note = f"{reason}; its bundle {published.version} had been published (live={published.live}) before"
    return {
        "state": "succeeded",
        "error": None,
        "bundle_version": published.version,
        "live": published.live,
        "gate_reason": published.gate.reason if published.gate else None,
        "log_tail": [*record.log_tail, note],
    }


def _crashed_after_publishing(record: JobRecord) -> bool:
    """A record an older sweep failed (worker died) whose job may still have published its version."""
    return (
        record.state == "failed"
        and record.bundle_version is None
        and (record.error or "").startswith("worker died")
    )


def fail_dead_jobs(records: RecordStore, *, timeout_s: float, at_start: bool = False) -> list[str]:
    """Mark jobs whose worker is gone as failed (or succeeded, when their version had been published:
    the record never contradicts CURRENT); returns their ids."""
    host = socket.gethostname()
    failed = []
    now = time.time()
    for record in records.recent(limit=10_000):
        if at_start and _crashed_after_publishing(record):
            end = _end_state(record, record.error or "worker died", record.finished_at or now)
            if end["state"] == "succeeded" and update(records, record.id, expect={"failed"}, **end):
                logger.warning("job %s: %s", record.id, end["log_tail"][-1])  # type: ignore[index]
            continue
        reason = _death_reason(record, host=host, at_start=at_start, timeout_s=timeout_s)
        if reason is None:
            continue
        end = _end_state(record, reason, now)
        done = update(records, record.id, expect={record.state}, finished_at=now, **end)
        if done is not None:
            logger.warning("job %s: %s -> %s", record.id, reason, done.state)
            failed.append(record.id)
    return failed


def _beat_and_sweep(records: RecordStore, timeout_s: float, stop: threading.Event) -> None:
    """Stamp this worker's own heartbeat (idle or busy), then fail jobs whose heartbeat expired."""
    beat = WorkerBeat(
        id=f"{socket.gethostname()}:{os.getpid()}", started_at=time.time(), heartbeat_at=time.time()
    )
    while True:
        try:
            records.beat_worker(beat.model_copy(update={"heartbeat_at": time.time()}))
            fail_dead_jobs(records, timeout_s=timeout_s)
        except Exception:  # a busy or unreachable store must not end the thread
            logger.warning("worker heartbeat / dead-job sweep failed", exc_info=True)
        if stop.wait(SWEEP_INTERVAL_S):
            return


def check_progress_interval(interval_s: float, heartbeat_timeout_s: float) -> None:
    """A ValueError unless BEATS_PER_TIMEOUT job heartbeats fit in the timeout that fails a silent job."""
    if interval_s <= 0 or interval_s * BEATS_PER_TIMEOUT > heartbeat_timeout_s:
        raise ValueError(
            f"--progress-interval-s {interval_s:g}: must be above 0 and at most the heartbeat timeout "
            f"({heartbeat_timeout_s:g}s) / {BEATS_PER_TIMEOUT}, or live jobs would read as dead"
        )


def run_worker(
    url: str,
    *,
    workers: int = 1,
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
    device: str = "auto",
    progress_interval_s: float = HEARTBEAT_INTERVAL_S,
) -> None:
    """Block running huey's consumer until SIGINT (graceful) or SIGTERM.

    `device`: where retrain jobs train unless a job's options name one (training/train/device.py).
    `progress_interval_s`: how often a running job writes its heartbeat, progress and log lines; a
    ValueError unless BEATS_PER_TIMEOUT of them fit in `heartbeat_timeout_s`.
    """
    from training.jobs import tasks

    check_progress_interval(progress_interval_s, heartbeat_timeout_s)
    tasks.DEFAULT_DEVICE = device
    tasks.PROGRESS_INTERVAL_S = progress_interval_s
    huey, _ = open_huey(url, tasks.execute)
    records = open_records(url)
    fail_dead_jobs(records, timeout_s=heartbeat_timeout_s, at_start=True)
    stop = threading.Event()
    sweeper = threading.Thread(
        target=_beat_and_sweep,
        args=(records, heartbeat_timeout_s, stop),
        name="worker-heartbeat",
        daemon=True,
    )
    sweeper.start()
    # max_delay: an idle SQLite queue is polled with backoff; cap it so a new job starts within a second.
    ready = f"worker {socket.gethostname()}:{os.getpid()} consuming {url} with {workers} thread(s)"
    consumer = _Consumer(huey, ready, workers=workers, worker_type="thread", periodic=False, max_delay=1.0)
    try:
        consumer.run()
    finally:
        stop.set()
