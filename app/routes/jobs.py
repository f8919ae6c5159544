"""POST /jobs, GET /jobs, GET /jobs/{id}, POST /jobs/{id}/cancel: retrain and reindex as queued jobs.

The API only records and enqueues (training.jobs.queue); a separate worker process runs the job
(`python -m training worker`). When a job publishes a new live bundle, the holder's CURRENT poll swaps it in.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from app.deps import ApiKeyDep, SettingsDep
from training.jobs.queue import JobQueue, JobRecord, WorkerBeat

router = APIRouter(tags=["jobs"])
_queue_lock = threading.Lock()


class JobSubmission(BaseModel):
    type: Literal["retrain", "reindex"]
    dataset: str = Field(min_length=1, max_length=255, description="a dataset name under the data root")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="retrain: TrainConfig fields plus index_kind; reindex: index_kind, force",
    )


class JobList(BaseModel):
    jobs: list[JobRecord]
    workers: list[WorkerBeat] = Field(
        description="Worker processes seen recently; `alive` = heartbeat fresh."
    )


def get_job_queue(request: Request, settings: SettingsDep) -> JobQueue:
    """One JobQueue per app (opened on first use, so apps that never see a job open no queue)."""
    with _queue_lock:
        queue = getattr(request.app.state, "job_queue", None)
        if queue is None:
            assert settings.queue_url is not None  # Settings fills in the default
            queue = JobQueue(settings.queue_url, heartbeat_timeout_s=settings.job_heartbeat_timeout_s)
            request.app.state.job_queue = queue
        return queue


QueueDep = Annotated[JobQueue, Depends(get_job_queue)]
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key sent."},
    403: {"description": "Wrong API key, or none configured on the server."},
}


@router.post(
    "/jobs",
    status_code=202,
    response_model=JobRecord,
    dependencies=[ApiKeyDep],
    responses={
        **_ERRORS,
        400: {"description": "The dataset name resolves outside the data root."},
        404: {"description": "No dataset with that name under the data root."},
        422: {"description": "Bad body or options; the message names the field."},
    },
    summary="Queue a retrain or reindex job",
)
def submit_job(body: JobSubmission, queue: QueueDep, settings: SettingsDep) -> JobRecord:
    """Validate and queue the job; a worker picks it up. Poll GET /jobs/{id} for its progress."""
    return queue.submit(
        body.type, body.dataset, body.options, data_root=settings.data_root, bundles_dir=settings.bundles_dir
    )


@router.get("/jobs", response_model=JobList, summary="Recent jobs, newest first")
def list_jobs(queue: QueueDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> JobList:
    return JobList(jobs=queue.recent(limit), workers=queue.workers())


@router.get(
    "/jobs/{job_id}",
    response_model=JobRecord,
    responses={404: {"description": "No such job."}},
    summary="One job",
)
def get_job(job_id: str, queue: QueueDep) -> JobRecord:
    """State, progress (step/total, epoch, loss, ETA), log tail, bundle version and gate decision.
    A running job whose worker stopped sending heartbeats reads as failed."""
    return queue.get(job_id)


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobRecord,
    dependencies=[ApiKeyDep],
    responses={
        **_ERRORS,
        404: {"description": "No such job."},
        409: {"description": "The job already finished."},
    },
    summary="Cancel a job",
)
def cancel_job(job_id: str, queue: QueueDep) -> JobRecord:
    """Queued: cancelled at once. Running: cancelled at its next training step (state stays `running`
    with `cancel_requested` until then); it publishes nothing."""
    return queue.cancel(job_id)
