"""Submit, list and cancel retrain/reindex jobs: the contract the API and the CLI share.

Contract module (the API imports it): no torch, faiss or sentence-transformers, and no training code.
The task body lives in `training.jobs.tasks`; the worker hands it to `open_huey`.

The queue is huey, selected by one URL:

- `sqlite:///path/jobs.db` (default): `SqliteHuey`, no extra server; API, CLI and worker share the file.
- `redis://host:port/db`: `RedisHuey`, for APIs and workers on different machines. Records then live in
  Redis too (see records.py). Dataset and bundle paths are passed to the worker as absolute paths, so
  every machine must mount the data root and the bundles folder at the same path.

A job's huey task id is its job id, so cancelling a queued job revokes exactly that message.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from huey import Huey, RedisHuey, SqliteHuey
from huey.api import TaskWrapper
from huey.exceptions import RetryTask
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contract.config import TrainConfig
from contract.defaults import DEFAULT_COLLECTION
from contract.errors import JobConflict, JobOptionsInvalid
from contract.index.backend import BackendConfig, IndexBackend, IndexKind
from contract.jobs.confine import confine_dataset, confine_options, resolve_dataset
from contract.jobs.defaults import DEFAULT_HEARTBEAT_TIMEOUT_S, default_queue_url
from contract.jobs.plan import (
    JOB_SCOPE,
    START_FROM_HELP,
    DataPlan,
    FeedbackUse,
    IndexPlan,
    PublicationPlan,
    PublishPlan,
    RetrainPlan,
    RetrainScope,
    StartFrom,
    retrain_plan,
    scope_of,
)
from contract.jobs.records import (
    FINISHED,
    NOT_STARTED,
    JobRecord,
    JobState,
    JobType,
    Progress,
    RecordStore,
    WorkerBeat,
    open_records,
)
from contract.query_config import QueryRetrainConfig

logger = logging.getLogger(__name__)

QUEUE_NAME = "infonce-search"

__all__ = [
    "CollectionBusy",
    "DEFAULT_HEARTBEAT_TIMEOUT_S",
    "default_queue_url",
    "JobQueue",
    "JobRecord",
    "JobState",
    "JobType",
    "Progress",
    "RetrainOptions",
    "ReindexOptions",
    "WorkerBeat",
    "open_huey",
    "resolve_dataset",
]


class RetrainOptions(TrainConfig, QueryRetrainConfig):
    """retrain options: every TrainConfig field (the full retrain's), every QueryRetrainConfig field (the
    query-side retrain's: `query_lr`, `query_tower`, `query_epochs` …), plus what is retrained and how the
    candidate bundle is indexed and gated. Flat over HTTP (the spec's schema); the worker reads them only
    as a RetrainPlan (contract/jobs/plan.py, `plan()`), grouped by concern."""

    # auto (JOB_SCOPE): a query-side retrain (only a query tower, against the live bundle's fixed document
    # vectors and index: no corpus encode, training/distill/query_retrain.py) when the live bundle holds
    # this dataset's documents unchanged, is FAISS and cosine, and no base_model is given; otherwise full
    retrain_scope: RetrainScope | None = Field(
        None,
        description="What a retrain trains: full (both towers, the corpus encoded again), query (only a "
        "query tower against the live bundle's fixed document vectors and index: no corpus encode), or auto "
        "(query when a live FAISS bundle of a cosine model holds this dataset's documents unchanged, else "
        "full). Unset: auto.",
    )
    tower: RetrainScope | None = Field(
        None, description="Deprecated: the old name of retrain_scope, still accepted.", deprecated=True
    )
    feedback: FeedbackUse | None = Field(
        None,
        description="The relevance judgments of the collection (POST /feedback): include (the positive "
        "ones train beside the dataset's pairs, a seeded 20% of the judged queries held out to evaluate "
        "and gate on), only (they alone train), exclude (ignored). Unset: include when the collection has "
        "positive judgments.",
    )
    start_from: StartFrom = Field("base", description=START_FROM_HELP)
    index_kind: IndexKind = "auto"
    index_backend: IndexBackend = "faiss"  # milvus: the worker's --milvus-uri (docs/deploy.md)
    force: bool = False  # True: publish live even if the quality gate would keep it as a candidate
    onnx: bool = True  # export + quality-check the ONNX query encoders into the bundle
    distill: bool = True  # also train + score the static query encoder (training.distill.bundle_step)

    @model_validator(mode="after")
    def _one_start(self) -> RetrainOptions:
        # refused at submission what training/publish/start_model.py would refuse when the job runs
        if self.start_from == "live" and self.base_model is not None:
            raise ValueError("start_from live and base_model name two starting models: give one")
        if self.start_from == "live" and scope_of(self.retrain_scope, self.tower, JOB_SCOPE) == "query":
            raise ValueError("start_from live applies to a full retrain, not to retrain_scope query")
        return self

    def plan(self, *, data_dir: str, bundles_dir: str, backend: BackendConfig | None = None) -> RetrainPlan:
        """These options as the job's plan: the one place that reads them (the worker)."""
        # these options are both configs already, validated (cross-field rules too): taken apart, not
        # checked a second time
        values = dict(self)
        training = TrainConfig.model_construct(**{name: values[name] for name in TrainConfig.model_fields})
        query = QueryRetrainConfig.model_construct(
            **{name: values[name] for name in QueryRetrainConfig.model_fields}
        )
        publish = _publish_plan(self, data_dir, bundles_dir, backend)
        scope = scope_of(self.retrain_scope, self.tower, JOB_SCOPE)
        return retrain_plan(training, query, publish, scope, self.feedback, self.start_from)


class ReindexOptions(BaseModel):
    """reindex options. The live model re-encodes the dataset's corpus into a new bundle."""

    model_config = ConfigDict(extra="forbid")

    index_kind: IndexKind = "auto"
    index_backend: IndexBackend = "faiss"  # milvus: the worker's --milvus-uri (docs/deploy.md)
    # the gate applies unless the submitter asks for force=True: a reindex publishes a corpus the service
    # then answers from, so it must not become live behind the operator's back (a planted dataset would)
    force: bool = False
    onnx: bool = True  # export + quality-check the ONNX query encoders into the bundle
    distill: bool = True  # also train + score the static query encoder (training.distill.bundle_step)

    def plan(self, *, data_dir: str, bundles_dir: str, backend: BackendConfig | None = None) -> PublishPlan:
        return _publish_plan(self, data_dir, bundles_dir, backend)


def _publish_plan(
    options: RetrainOptions | ReindexOptions, data_dir: str, bundles_dir: str, backend: BackendConfig | None
) -> PublishPlan:
    """The publish part of a job's options; `distill` not sent means "where it can run" (the default
    static tower, skipped with a log line where it cannot: no train split, a Milvus index)."""
    return PublishPlan(
        data=DataPlan(data_dir=data_dir),
        index=IndexPlan(kind=options.index_kind, backend=backend),
        publication=PublicationPlan(
            bundles_dir=bundles_dir,
            force=options.force,
            onnx=options.onnx,
            distill=options.distill if "distill" in options.model_fields_set else None,
        ),
    )


OPTION_MODELS: dict[str, type[BaseModel]] = {"retrain": RetrainOptions, "reindex": ReindexOptions}


def validate_options(job_type: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options as given (defaults left out), or JobOptionsInvalid naming the first bad field."""
    model = OPTION_MODELS.get(job_type)
    if model is None:
        raise JobOptionsInvalid("", f"unknown job type {job_type!r} (expected retrain or reindex)")
    if "tower" in options:
        logger.warning("job option `tower` is deprecated: send `retrain_scope` (the same values)")
    try:
        return model.model_validate(options).model_dump(exclude_unset=True)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise JobOptionsInvalid(field, first["msg"]) from None


Execute = Callable[[str, RecordStore], None]


def _submit_only(job_id: str, records: RecordStore) -> None:
    raise RuntimeError(f"job {job_id}: this process only submits jobs; the worker runs them")


class CollectionBusy(Exception):
    """Raised by a worker's `execute` when the job's collection has another job running: the job goes
    back to the queue (still `queued`) for `retry_s` instead of holding a worker thread while it waits,
    so one collection's queue never holds a thread another collection's job could run on."""

    def __init__(self, message: str, retry_s: float = 2.0):
        super().__init__(message)
        self.retry_s = retry_s


def open_huey(url: str, execute: Execute = _submit_only) -> tuple[Huey, TaskWrapper]:
    """The huey instance for a queue URL and its one task, `run_job(job_id)`.

    The API and the worker both call this, so they agree on the task's registry name. Only the worker
    passes `execute` (training.jobs.tasks.execute): a message carries the task name and job id, never
    the body, so submitters need not import the training code.
    """
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        huey: Huey = SqliteHuey(QUEUE_NAME, filename=str(path), results=False)
    elif url.startswith(("redis://", "rediss://", "unix://")):
        huey = RedisHuey(QUEUE_NAME, url=url, results=False)
    else:
        raise ValueError(f"queue URL {url!r}: expected sqlite:///path/jobs.db or redis://host:port/db")

    def run_job(job_id: str) -> None:
        try:
            execute(job_id, open_records(url))
        except CollectionBusy as busy:  # huey re-queues it (same id, so a cancel still revokes it)
            raise RetryTask(str(busy), delay=busy.retry_s) from None

    return huey, huey.task(name="run_job")(run_job)


class JobQueue:
    """Jobs as seen by submitters: records plus the huey queue that carries them to a worker."""

    def __init__(self, url: str, *, heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S):
        self.url = url
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.huey, self._run_job = open_huey(url)
        self.records: RecordStore = open_records(url)

    def submit(
        self,
        job_type: str,
        dataset: str,
        options: dict[str, Any] | None,
        *,
        data_root: str | Path,
        bundles_dir: str | Path,
        models_root: str | Path | None = None,
        collection: str = DEFAULT_COLLECTION,
        reason: str | None = None,
    ) -> JobRecord:
        """Validate, record as `queued`, then enqueue (a worker that sees the message finds its record).

        `bundles_dir` is the folder of `collection` (the job publishes there; the worker serves every
        collection, each job naming its own folder).

        Every file the job will read is confined first (contract.jobs.confine): the dataset's files
        under `data_root`, a base model under `models_root`; the worker checks again before reading.
        """
        given = dict(options or {})
        splits, _ = confine_options(given, models_root=models_root)
        clean = validate_options(job_type, given)
        data_dir = resolve_dataset(data_root, dataset)
        confine_dataset(data_root, data_dir, splits)
        record = JobRecord(
            id=uuid.uuid4().hex,
            type=cast(JobType, job_type),
            dataset=dataset,
            options=clean,
            data_dir=str(data_dir),
            bundles_dir=str(Path(bundles_dir).resolve()),
            collection=collection,
            data_root=str(Path(data_root).resolve()),
            models_root=None if models_root is None else str(Path(models_root).resolve()),
            reason=reason,
        )
        self.records.create(record)
        self.huey.enqueue(self._run_job.s(record.id, id=record.id))
        logger.info("job %s queued: %s %s into collection %s", record.id, job_type, dataset, collection)
        return record

    def close(self) -> None:
        """Release the queue's connections (the API closes it when its lifespan ends)."""
        self.records.close()
        self.huey.storage.close()

    def get(self, job_id: str) -> JobRecord:
        return self.records.get(job_id).as_seen(self.heartbeat_timeout_s)

    def recent(self, limit: int = 100) -> list[JobRecord]:
        return [r.as_seen(self.heartbeat_timeout_s) for r in self.records.recent(limit)]

    def workers(self) -> list[WorkerBeat]:
        """Workers seen in the last day, newest heartbeat first, `alive` judged by the heartbeat timeout."""
        now = time.time()
        return [
            w.model_copy(update={"alive": now - w.heartbeat_at <= self.heartbeat_timeout_s})
            for w in self.records.workers()
        ]

    def cancel(self, job_id: str) -> JobRecord:
        """Queued → cancelled now (and its message revoked); running → cancelled at the next step."""
        now = time.time()

        def fn(record: JobRecord) -> JobRecord | None:
            if record.state == "queued":
                # its phase said "queued" for good, which reads as still waiting: it never started
                progress = record.progress.model_copy(update={"phase": NOT_STARTED})
                return record.model_copy(
                    update={
                        "state": "cancelled",
                        "cancel_requested": True,
                        "finished_at": now,
                        "progress": progress,
                    }
                )
            if record.state == "running":
                return record.model_copy(update={"cancel_requested": True})
            return None

        current = self.get(job_id)
        if current.state in FINISHED and current.state != "cancelled":
            raise JobConflict(f"job {job_id} already {current.state}; nothing to cancel")
        new = self.records.mutate(job_id, fn)
        if new is not None and new.state == "cancelled":
            self.huey.revoke_by_id(job_id, revoke_once=True)
        return self.get(job_id)
