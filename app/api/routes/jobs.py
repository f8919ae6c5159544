"""POST /jobs, GET /jobs, GET /jobs/{id}, POST /jobs/{id}/cancel: retrain and reindex as queued jobs.

The API only records and enqueues (contract.jobs.queue); a separate worker process runs the job
(`python -m training worker`). When a job publishes a new live bundle, the API's CURRENT poll (app/live/hot_swap.py) swaps it in.
"""

from __future__ import annotations

import collections
import os
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import ApiKeyDep, CollectionScope, SettingsDep, has_api_key
from app.settings import Settings
from contract.defaults import DEFAULT_COLLECTION
from contract.errors import JobNotFound
from contract.jobs.confine import NAME_PATTERN, list_datasets
from contract.jobs.queue import (
    JobQueue,
    JobRecord,
    JobState,
    JobType,
    Progress,
    ReindexOptions,
    RetrainOptions,
    WorkerBeat,
)

router = APIRouter(tags=["jobs"])
REQUEST_SCHEMA_KEY = "x-request-schema"  # app/api/openapi.py replaces the body schema with the named type


DatasetName = Annotated[
    str,
    Field(
        min_length=1, max_length=255, pattern=NAME_PATTERN, description="A dataset name under the data root."
    ),
]


class JobSubmission(BaseModel):
    """What the server reads. Options are validated per job type by contract.jobs.queue (after the
    path-like ones are confined: 400), so a bad option names its field as `options.<name>`; the spec
    documents the same closed option sets as `JobSubmissionSpec` (one schema per type)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["retrain", "reindex"]
    dataset: DatasetName
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="retrain: TrainConfig and QueryRetrainConfig fields plus retrain_scope (tower: its "
        "deprecated name), index_kind, index_backend, force, onnx, distill; reindex: index_kind, index_backend, "
        "force, onnx, distill",
    )


class RetrainJob(BaseModel):
    model_config = ConfigDict(extra="forbid", title="RetrainJob")

    type: Literal["retrain"]
    dataset: DatasetName
    options: RetrainOptions = Field(default_factory=RetrainOptions)


class ReindexJob(BaseModel):
    model_config = ConfigDict(extra="forbid", title="ReindexJob")

    type: Literal["reindex"]
    dataset: DatasetName
    options: ReindexOptions = Field(default_factory=ReindexOptions)


# the request body as documented: one closed schema per job type (app/api/openapi.py puts it in the spec)
JobSubmissionSpec = Annotated[RetrainJob | ReindexJob, Field(discriminator="type")]


class JobSummary(BaseModel):
    """What anyone may read about a job: its state and progress (no paths, logs, errors or hosts)."""

    id: str
    type: JobType
    collection: str = Field(DEFAULT_COLLECTION, description="The collection it publishes into.")
    state: JobState
    progress: Progress
    cancel_requested: bool
    created_at: float = Field(description="Unix seconds.")
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = Field(
        None,
        description="Seconds from start to finish (finished), or so far (running); null before it starts.",
    )


class JobDetail(JobSummary):
    """With the API key: the whole record; paths are relative to their roots (data root, bundles folder)."""

    dataset: str
    options: dict[str, Any]
    data_dir: str = Field(description="The dataset's path relative to the data root.")
    log_tail: list[str]
    bundle_version: str | None = None
    live: bool | None = Field(None, description="Did the gate accept the candidate (publish it as CURRENT)?")
    gate_reason: str | None = None
    retrain_scope: str | None = Field(
        None, description="What a retrain trained: full, or query (query tower only, the live index kept)."
    )
    tower: str | None = Field(
        None, description="Deprecated: the old name of retrain_scope (the same value).", deprecated=True
    )
    scope_reason: str | None = Field(
        None,
        description="Why a retrain trained that scope: what `auto` saw in the live bundle, or 'asked for'.",
    )
    feedback: dict[str, Any] | None = Field(
        None,
        description="A retrain's relevance judgments: `use` (include | only | exclude, as resolved) and "
        "`reason`, the judged pairs trained on, and `heldout`: the held-out judged queries' nDCG@10 of the "
        "candidate and of the live model (docs/jobs.md).",
    )
    reason: str | None = Field(
        None, description="Why it was submitted when no person did (SEARCH_RETRAIN_ON_DRIFT)."
    )
    error: str | None = None
    worker: str | None = Field(None, description="host:pid of the worker running it.")
    heartbeat_at: float | None = None


JobView = JobDetail | JobSummary


class JobList(BaseModel):
    jobs: list[JobView]
    workers: list[WorkerBeat] = Field(
        default_factory=list,
        description="Worker processes seen recently; `alive` = heartbeat fresh (only with the API key).",
    )


# an absolute path left after the roots are taken out (a job's temp folder, a package's file): not after a
# word character, ':', '/' or '.', so a URL's path or a relative path's inner slashes never match
_ABSOLUTE = re.compile(r"(?<![\w.:/])(?:/[\w.+@~-]+)+")


def _relative(text: str, roots: list[str]) -> str:
    """`text` with every absolute root removed (longest first), and any other absolute path cut to its last
    component (`…/name`), so no absolute path leaves the server."""
    for root in roots:
        text = text.replace(root + os.sep, "").replace(root, ".")
    return _ABSOLUTE.sub(lambda m: "…/" + m.group(0).rsplit("/", 1)[-1], text)


def job_view(record: JobRecord, settings: Settings, *, detailed: bool) -> JobView:
    """The public view (state and progress), or with the key the record with paths relative to roots."""
    duration = {"duration_s": None if record.duration_s is None else round(record.duration_s, 3)}
    summary = JobSummary.model_validate(record.model_dump(include=set(JobSummary.model_fields)) | duration)
    if not detailed:
        return summary
    forms = {
        form
        for root in (
            record.data_root or settings.data_root,
            record.models_root or settings.models_root,
            record.bundles_dir,
        )
        for form in (os.path.realpath(root), os.path.abspath(root))  # absolute only: "data" is also a word
    }
    ordered = sorted(forms, key=len, reverse=True)  # a root inside another goes first
    fields = record.model_dump(include=set(JobDetail.model_fields)) | duration
    fields["data_dir"] = _relative(record.data_dir, ordered) or "."
    fields["error"] = _relative(record.error, ordered) if record.error else None
    fields["log_tail"] = [_relative(line, ordered) for line in record.log_tail]
    return JobDetail.model_validate(fields)


def get_job_queue(request: Request) -> JobQueue:
    """The app's JobQueue: opened and closed by the lifespan (app/main.py)."""
    return request.state.job_queue


def job_counts(queue: JobQueue) -> list[tuple[str, str, int]]:
    """(type, state, jobs) over the newest 10,000 records, for /metrics."""
    counts = collections.Counter((r.type, r.state) for r in queue.recent(10_000))
    return [(job_type, state, n) for (job_type, state), n in sorted(counts.items())]


QueueDep = Annotated[JobQueue, Depends(get_job_queue)]
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key sent."},
    403: {"description": "Wrong API key, or none configured on the server."},
}


@router.post(
    "/jobs",
    status_code=202,
    response_model=JobDetail,
    dependencies=[ApiKeyDep],
    responses={
        **_ERRORS,
        400: {
            "description": "A file the job would read, a split name or the base model resolves outside "
            "its root (docs/security.md)."
        },
        404: {"description": "No dataset with that name under the data root."},
        422: {"description": "Bad body or options; the message names the field."},
    },
    summary="Queue a retrain or reindex job",
    openapi_extra={REQUEST_SCHEMA_KEY: "JobSubmissionSpec"},
)
def submit_job(
    body: JobSubmission, queue: QueueDep, settings: SettingsDep, collection: CollectionScope
) -> JobDetail:
    """Validate and queue the job; a worker picks it up. Poll GET /jobs/{id} for its progress. It
    publishes into the collection of the route (/jobs: `default`)."""
    record = queue.submit(
        body.type,
        body.dataset,
        body.options,
        data_root=settings.data_root,
        bundles_dir=settings.bundles_dir,  # the collection's folder (app/api/collection_scope.py)
        models_root=settings.models_root,
        collection=collection or DEFAULT_COLLECTION,
    )
    return job_view(record, settings, detailed=True)  # type: ignore[return-value]


class DatasetList(BaseModel):
    datasets: list[str] = Field(
        description="Names under the server's data root a job may be given: BEIR folders (with "
        "corpus.jsonl) and pairs files; links out of the root left out."
    )


@router.get(
    "/datasets",
    response_model=DatasetList,
    dependencies=[ApiKeyDep],
    responses=_ERRORS,
    summary="Datasets a job may name",
)
def get_datasets(settings: SettingsDep) -> DatasetList:
    """What POST /jobs accepts as `dataset` (SEARCH_DATA_ROOT's entries); the page offers them as a list.
    Behind the key, as submitting is: the names say what data the server holds."""
    return DatasetList(datasets=list_datasets(settings.data_root))


KeyGiven = Annotated[bool, Depends(has_api_key)]
_READ_ERRORS: dict[int | str, dict[str, Any]] = {403: {"description": "A wrong API key was sent."}}


@router.get("/jobs", response_model=JobList, responses=_READ_ERRORS, summary="Recent jobs, newest first")
def list_jobs(
    queue: QueueDep,
    settings: SettingsDep,
    keyed: KeyGiven,
    collection: CollectionScope,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobList:
    """Without the API key: state and progress only. With it: the whole records and the workers.
    /jobs lists the jobs of every collection (each names its own); /collections/{c}/jobs only c's."""
    records = queue.recent(limit if collection is None else 10_000)
    if collection is not None:
        records = [r for r in records if r.collection == collection][:limit]
    jobs = [job_view(r, settings, detailed=keyed) for r in records]
    return JobList(jobs=jobs, workers=queue.workers() if keyed else [])


@router.get(
    "/jobs/{job_id}",
    response_model=JobView,
    responses={**_READ_ERRORS, 404: {"description": "No such job."}},
    summary="One job",
)
def get_job(
    job_id: str, queue: QueueDep, settings: SettingsDep, keyed: KeyGiven, collection: CollectionScope
) -> JobView:
    """State and progress (step/total, epoch, loss, ETA); with the API key also the dataset, options,
    log tail, error, bundle version and gate decision. A running job whose worker stopped sending
    heartbeats reads as failed."""
    return job_view(_in_scope(queue.get(job_id), collection), settings, detailed=keyed)


def _in_scope(record: JobRecord, collection: str | None) -> JobRecord:
    """Under /collections/{c}/, a job of another collection is not found there."""
    if collection is not None and record.collection != collection:
        raise JobNotFound(f"no job {record.id} in collection {collection!r}")
    return record


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobDetail,
    dependencies=[ApiKeyDep],
    responses={
        **_ERRORS,
        404: {"description": "No such job."},
        409: {"description": "The job already finished."},
    },
    summary="Cancel a job",
)
def cancel_job(job_id: str, queue: QueueDep, settings: SettingsDep, collection: CollectionScope) -> JobDetail:
    """Queued: cancelled at once. Running: cancelled at its next training step (state stays `running`
    with `cancel_requested` until then); it publishes nothing."""
    _in_scope(queue.get(job_id), collection)
    return job_view(queue.cancel(job_id), settings, detailed=True)  # type: ignore[return-value]
