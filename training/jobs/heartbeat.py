"""The progress side of a running job: `JobHeartbeat` collects its progress and log lines, a thread writes
them to the job record with the heartbeat every `interval_s` (the worker's --progress-interval-s, default
HEARTBEAT_INTERVAL_S) and reads back `cancel_requested`.

The trainer's progress callback (`on_progress`) raises `JobCancelled` at the next step once a cancel was
requested; `check_cancel` does the same between phases and every 1,024 documents encoded."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from contract.errors import JobCancelled
from contract.jobs.records import HEARTBEAT_INTERVAL_S, LOG_TAIL_LINES, JobRecord, Progress, RecordStore

logger = logging.getLogger(__name__)
TRAIN_PHASE = "train"  # the trainer's and the query-side retrain's steps


class JobHeartbeat(logging.Handler):
    """Collects this job's progress and log lines; a thread writes them out with the heartbeat."""

    def __init__(self, records: RecordStore, job_id: str, interval_s: float = HEARTBEAT_INTERVAL_S):
        super().__init__(level=logging.INFO)
        self.interval_s = interval_s
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        self.records = records
        self.job_id = job_id
        self.cancel = threading.Event()
        self._thread_id = threading.get_ident()  # only the job's own thread's log lines are its log
        self._lines: list[str] = []
        self._progress: Progress | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._finished = False
        self._beater = threading.Thread(target=self._run, name=f"heartbeat-{job_id[:8]}", daemon=True)

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self._thread_id:
            with self._mutex:
                self._lines = (self._lines + [self.format(record)])[-LOG_TAIL_LINES:]

    def progress(self, **fields: Any) -> None:
        with self._mutex:
            self._progress = (self._progress or Progress()).model_copy(update=fields)

    def phase_progress(self, phase: str, done: int, total: int | None, **extra: Any) -> None:
        """A phase's count (training/data/progress.py's listener): the fraction done, and the time left at
        the phase's own rate so far (a reindex's encode and its distillation run at rates minutes apart,
        so one job-wide rate would mislead). A new phase starts its clock and clears the last one's count."""
        now = time.time()
        with self._mutex:
            current = self._progress or Progress()
            if current.phase != phase or current.phase_started_at is None:
                current = Progress(phase=phase, phase_started_at=now, budget_s=current.budget_s)
            fraction = min(1.0, done / total) if total else None
            elapsed = now - (current.phase_started_at or now)
            eta = elapsed / done * (total - done) if total and done > 0 and elapsed > 0 else None
            self._progress = current.model_copy(
                update={"step": done, "total_steps": total, "fraction": fraction, "eta_s": eta, **extra}
            )

    def on_progress(self, info: dict[str, Any]) -> None:
        """The trainer's callback: record the step, and raise if a cancel was requested."""
        extra = {k: info[k] for k in ("epoch", "loss", "temperature") if k in info}
        self.phase_progress(TRAIN_PHASE, int(info.get("step", 0)), info.get("total_steps"), **extra)
        if self.cancel.is_set():
            raise JobCancelled(f"job {self.job_id} cancelled at step {info.get('step')}")

    def check_cancel(self) -> None:
        """Between phases: honour a cancel without waiting for the next heartbeat."""
        if self.cancel.is_set() or self.records.get(self.job_id).cancel_requested:
            raise JobCancelled(f"job {self.job_id} cancelled")

    def beat(self, final: dict[str, Any] | None = None) -> None:
        """Write heartbeat, latest progress and new log lines (and, with `final`, the end state)."""
        with self._mutex:
            lines, self._lines = self._lines, []
            progress = self._progress

        def fn(record: JobRecord) -> JobRecord | None:
            if record.cancel_requested or record.state == "cancelled":
                self.cancel.set()
            if final is not None and record.state not in ("queued", "running"):
                return None  # already failed by a sweeper that thought us dead: keep its verdict
            changes: dict[str, Any] = {"heartbeat_at": time.time()}
            if lines:
                changes["log_tail"] = (record.log_tail + lines)[-LOG_TAIL_LINES:]
            if progress is not None:
                changes["progress"] = progress
            if final is not None:
                end: dict[str, Any] = {"phase": final["state"]}
                if final["state"] == "succeeded":
                    end.update(fraction=1.0, eta_s=None)
                done = (progress or record.progress).model_copy(update=end)
                changes.update(final, progress=done, finished_at=time.time())
            return record.model_copy(update=changes)

        self.records.mutate(self.job_id, fn)

    def finish(self, final: dict[str, Any]) -> None:
        """Stop the heartbeat and write the end state with the last progress and log lines (once)."""
        if self._finished:
            return
        self._finished = True
        self._stop.set()
        if self._beater.is_alive():
            self._beater.join()
        self.beat(final)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # a busy database must not kill the heartbeat thread
                logger.warning("heartbeat for job %s failed", self.job_id, exc_info=True)

    def __enter__(self) -> JobHeartbeat:
        logging.getLogger().addHandler(self)
        self._beater.start()
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
        self.finish({"state": "failed", "error": "the job ended without recording an outcome"})
