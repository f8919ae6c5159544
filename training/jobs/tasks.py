"""What a worker does with one job: take the bundle lock, run retrain or reindex, record the outcome.

retrain = `run_pipeline` (train → report → index → publish through the quality gate).
reindex = `index_model` on the live bundle's model folder (`<bundles>/<CURRENT>/model`).

A `JobHeartbeat` (training/jobs/heartbeat.py) writes the job's heartbeat, progress and log lines to its record
and turns a cancel request into `JobCancelled` at the next training step; after training, `check_cancel`
runs between phases and every 1,024 documents encoded, so a reindex of a large corpus is cancellable
too. The job ends `cancelled` and
publishes nothing. A cancel that arrives after publishing has started is too late: the job ends
`succeeded` with a log line saying so.

Only one job at a time per bundles folder (per collection: contract/bundles/collections.py): an fcntl
lock on `<bundles>/.jobs.lock`, held while the job runs. A job whose collection is busy does not wait on
a worker thread: it goes back to the queue (`CollectionBusy` → huey retries it a moment later) and stays
`queued` (phase "waiting: another job of collection … is running"), cancellable, so a job of another
collection can take that thread. The kernel drops the lock when the holder dies, even on kill -9.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.bundles.collections import DEFAULT_COLLECTION, collection_milvus_name
from contract.errors import InfonceSearchError, JobCancelled, JobOptionsInvalid, NoLiveBundle
from contract.index.backend import BackendConfig
from contract.jobs.confined_reader import ConfinedReader, confined_reads
from contract.jobs.queue import CollectionBusy
from contract.jobs.records import HEARTBEAT_INTERVAL_S, JobRecord, Progress, RecordStore, update
from training.data.progress import reporting_to
from training.jobs.heartbeat import TRAIN_PHASE, JobHeartbeat

if TYPE_CHECKING:
    from training.bundle.store import PublishResult
    from training.train.run_hooks import RunHooks

logger = logging.getLogger(__name__)

LOCK_FILE = ".jobs.lock"
# where retrain jobs train when their options do not say: the worker's --device (SEARCH_TRAIN_DEVICE)
DEFAULT_DEVICE = "auto"
# how often a running job writes its heartbeat, progress and log lines: the worker's --progress-interval-s
PROGRESS_INTERVAL_S = HEARTBEAT_INTERVAL_S
# the worker's Milvus (--milvus-uri …): jobs choose the backend, never where Milvus is (a job's submitter
# must not point the worker at an arbitrary server)
MILVUS: BackendConfig | None = None
# corpus embeddings shared by the jobs of one bundles folder (a retrain on an unchanged corpus reuses the
# base model's); a dot folder, which the bundle store never takes for a version
CACHE_DIR = ".cache/embeddings"
# a retrain's private folder (its copy of the base model, the training run, ~90 MB) lives under its bundles
# folder, not the system temp dir: a worker killed mid-job cannot remove it, and the next job of the same
# collection removes it instead (sweep_work_dirs: it holds the collection's lock, so no job of the
# collection is running); a dot folder, which the bundle store never takes for a version
WORK_DIR = ".jobs-work"
LOCK_POLL_S = 0.5


def embedding_cache_dir(bundles_dir: str | Path) -> Path:
    return Path(bundles_dir) / CACHE_DIR


def sweep_work_dirs(bundles_dir: Path) -> list[str]:
    """Remove what jobs of this bundles folder left in its work folder; the caller holds the job lock."""
    root = bundles_dir / WORK_DIR
    left = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    for name in left:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if left:
        logger.warning(
            "removed %d work folder(s) left in %s by jobs that did not finish (a worker killed mid-job): %s",
            len(left),
            root,
            ", ".join(left),
        )
    return left


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@contextmanager
def bundle_lock(bundles_dir: Path, heartbeat: JobHeartbeat) -> Iterator[None]:
    """Hold `<bundles>/.jobs.lock` exclusively; poll (so a waiting job stays cancellable)."""
    bundles_dir.mkdir(parents=True, exist_ok=True)
    with open(bundles_dir / LOCK_FILE, "a+") as fh:
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                heartbeat.check_cancel()
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextmanager
def bundle_lock_or_none(bundles_dir: Path) -> Iterator[bool]:
    """Hold `<bundles>/.jobs.lock` if it is free (yields True), else yield False at once."""
    with open(bundles_dir / LOCK_FILE, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def execute(job_id: str, records: RecordStore) -> None:
    """Run one job to a final state; every outcome is written to the record. Raises only CollectionBusy:
    another job of the same collection (bundles folder) is running, so this one goes back to the queue,
    still `queued`, rather than hold this worker thread (another collection's job may run on it)."""
    record = records.get(job_id)
    if record.state != "queued":
        logger.info("job %s is no longer queued (%s); skipping", job_id, record.state)
        return
    folder = Path(record.bundles_dir)
    if record.collection != DEFAULT_COLLECTION and not folder.is_dir():
        update(
            records,
            job_id,
            expect={"queued"},
            state="failed",
            error=f"collection {record.collection!r} was deleted before the job started",
            finished_at=time.time(),
        )
        return
    folder.mkdir(parents=True, exist_ok=True)  # `default`'s folder is made by its first job, as ever
    with bundle_lock_or_none(folder) as held:
        if not held:
            update(
                records,
                job_id,
                expect={"queued"},
                progress=Progress(phase=f"waiting: another job of collection {record.collection} is running"),
            )
            raise CollectionBusy(f"job {job_id}: collection {record.collection} is busy; re-queued")
        sweep_work_dirs(folder)
        _run_locked(job_id, records)


def _run_locked(job_id: str, records: RecordStore) -> None:
    """Under the collection's job lock: claim the job, run it, record the outcome."""
    claimed = update(
        records,
        job_id,
        expect={"queued"},
        worker=worker_id(),
        heartbeat_at=time.time(),
        progress=Progress(phase="starting"),
    )
    if claimed is None:
        logger.info("job %s is no longer queued (%s); skipping", job_id, records.get(job_id).state)
        return
    with JobHeartbeat(records, job_id, PROGRESS_INTERVAL_S) as heartbeat:
        try:
            started = update(records, job_id, expect={"queued"}, state="running", started_at=time.time())
            if started is None:
                raise JobCancelled(f"job {job_id} cancelled before it started")
            logger.info(
                "job %s started: %s on %s into collection %s",
                job_id,
                claimed.type,
                claimed.dataset,
                claimed.collection,
            )
            # the end state is written before the lock is released, so the records of jobs on one
            # bundles folder never overlap: the next job starts after this one has finished
            heartbeat.finish(_attempt(claimed, heartbeat))
        except Exception as e:  # cancelled just before it started
            heartbeat.finish(_failure(job_id, e))


def _attempt(record: JobRecord, heartbeat: JobHeartbeat) -> dict[str, Any]:
    try:
        # every dataset file the job reads, and its base model's files, are opened through this reader
        with confined_reads(job_reader(record)), reporting_to(heartbeat.phase_progress):
            job = _retrain if record.type == "retrain" else _reindex
            outcome = job(record, heartbeat)
    except Exception as e:
        return _failure(record.id, e)
    logger.info("job %s succeeded: bundle %s live=%s", record.id, outcome["bundle_version"], outcome["live"])
    return {"state": "succeeded", **outcome}


def _failure(job_id: str, error: Exception) -> dict[str, Any]:
    if isinstance(error, JobCancelled):
        logger.info("%s", error)
        return {"state": "cancelled"}
    if isinstance(error, InfonceSearchError):
        logger.error("job %s failed: %s", job_id, error)
        return {"state": "failed", "error": str(error)}
    logger.exception("job %s failed", job_id)  # the record must say what happened, whatever happened
    return {"state": "failed", "error": f"{type(error).__name__}: {error}"}


def _publish_outcome(published: PublishResult) -> dict[str, Any]:
    return {"bundle_version": published.version, "live": published.live, "gate_reason": published.reason}


def _data_root(record: JobRecord) -> str:
    """The job's data root; records from before roots were stored are confined to their dataset's folder."""
    if record.data_root is not None:
        return record.data_root
    data_dir = Path(record.data_dir)
    return str(data_dir if data_dir.is_dir() else data_dir.parent)


def job_reader(record: JobRecord) -> ConfinedReader:
    """The reader a job opens its inputs through (contract/jobs/confined_reader.py): data and models roots."""
    return ConfinedReader(data_root=_data_root(record), models_root=record.models_root)


def _confine(record: JobRecord, options: dict[str, Any]) -> tuple[list[str], Path | None]:
    """Re-check, before starting, that the files the job will open are under their roots, so a link
    planted after submission fails the job at once; the reader enforces it again at each open."""
    from contract.jobs.confine import confine_dataset, confine_options

    splits, model = confine_options(options, models_root=record.models_root)
    confine_dataset(_data_root(record), record.data_dir, splits)
    return splits, model


def _hooks(record: JobRecord, heartbeat: JobHeartbeat) -> RunHooks:
    """A job's hooks: progress and cancel through its record, no tqdm bars in the worker log, the corpus
    embeddings cached beside its collection's bundles."""
    from training.eval.embedding_cache import EmbeddingCache
    from training.train.run_hooks import RunHooks

    return RunHooks(
        on_progress=heartbeat.on_progress,
        show_progress=False,  # progress goes to the job record, not to tqdm bars in the worker log
        checkpoint=heartbeat.check_cancel,
        cache=EmbeddingCache(embedding_cache_dir(record.bundles_dir)),
    )


def _retrain(record: JobRecord, heartbeat: JobHeartbeat) -> dict[str, Any]:
    from contract.jobs.queue import RetrainOptions
    from training.publish.pipeline import run_pipeline

    options = RetrainOptions.model_validate(record.options)
    # where it trains unless the job says: the worker's --device
    worker_side: dict[str, Any] = {} if "device" in record.options else {"device": DEFAULT_DEVICE}
    backend = job_backend(options.index_backend, record.collection)
    _, model = _confine(record, record.options)
    work_root = Path(record.bundles_dir) / WORK_DIR
    work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"job-{record.id[:8]}-", dir=work_root) as work_dir:
        if model is not None:  # a private copy, every file read through the job's confined reader
            model = job_reader(record).copy_tree(model, Path(work_dir) / "base-model" / model.name)
        worker_side["base_model"] = None if model is None else str(model)
        plan = options.model_copy(update=worker_side).plan(
            data_dir=record.data_dir, bundles_dir=record.bundles_dir, backend=backend
        )
        heartbeat.phase_progress(TRAIN_PHASE, 0, plan.training.max_steps)
        heartbeat.progress(budget_s=plan.training.time_budget_s)
        result = run_pipeline(plan, work_dir, _hooks(record, heartbeat))
    scope = result.plan.scope
    logger.info("job %s: retrain_scope %s (%s)", record.id, scope, result.plan.scope_reason)
    # `tower`: the scope's name in records before retrain_scope, kept for their readers
    outcome = {
        "retrain_scope": scope,
        "tower": scope,
        "scope_reason": result.plan.scope_reason,
        "feedback": result.feedback,  # the judgments used, and the held-out slice's nDCG@10 of both models
    }
    return _publish_outcome(result.publish) | outcome


def _reindex(record: JobRecord, heartbeat: JobHeartbeat) -> dict[str, Any]:
    from contract.jobs.queue import ReindexOptions
    from training.bundle.store import BundleStore
    from training.publish.index_model import index_model

    options = ReindexOptions.model_validate(record.options)
    _confine(record, {"train_split": "test", "eval_split": "test"})
    store = BundleStore(record.bundles_dir)
    version = store.current_version()
    if version is None:
        raise NoLiveBundle(f"reindex needs a live bundle's model, and {record.bundles_dir} has none yet")
    model_dir = Path(record.bundles_dir) / version / "model"
    logger.info("re-encoding %s with the live model of bundle %s", record.dataset, version)
    heartbeat.check_cancel()
    backend = job_backend(options.index_backend, record.collection)
    plan = options.plan(data_dir=record.data_dir, bundles_dir=record.bundles_dir, backend=backend)
    return _publish_outcome(index_model(model_dir, plan, _hooks(record, heartbeat)))


def job_backend(name: str, collection: str = DEFAULT_COLLECTION) -> BackendConfig | None:
    """The index backend a job asked for, configured by this worker, with the Milvus names of the job's
    collection (`<name>_<collection>_v<version>`, contract/bundles/collections.py)."""
    if name == "faiss":
        return None
    if MILVUS is None:
        raise JobOptionsInvalid(
            "index_backend",
            "milvus, but this worker has no Milvus (start it with --milvus-uri or SEARCH_MILVUS_URI)",
        )
    return replace(MILVUS, milvus_name=collection_milvus_name(MILVUS.milvus_name, collection))
