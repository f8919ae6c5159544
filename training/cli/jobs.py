"""`python -m training jobs submit|status|list|cancel` and `python -m training worker`.

They talk to the queue and the records directly (no HTTP), with the same settings the API reads
(contract.jobs.settings.JobSettings, the command-line options on top): `--queue` / SEARCH_QUEUE_URL,
`--data-root` / SEARCH_DATA_ROOT, `--bundles` / SEARCH_BUNDLES_DIR, ...
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, Field

from contract.bundles.collections import DEFAULT_COLLECTION
from contract.errors import InfonceSearchError
from contract.jobs.queue import JobQueue
from contract.jobs.records import HEARTBEAT_INTERVAL_S, NOT_STARTED, JobRecord
from contract.jobs.settings import JobSettings
from contract.log_setup import LogFormat, configure_logging, silence_progress_bars
from training.cli.choices import Device, JobType, LogLevel, log_level_option
from training.cli.config_options import given_config, with_config_options
from training.cli.settings_options import (
    COLLECTION_HELP,
    collection_option,
    job_settings,
    setting_extra,
    setting_option,
)
from training.cli.support import text_table

jobs_app = typer.Typer(help="Submit, follow and cancel retrain/reindex jobs.", no_args_is_help=True)

QueueOpt = Annotated[
    str | None,
    setting_option("queue_url", "--queue", help="sqlite:///path/jobs.db or redis://host:port/db"),
]
BundlesOpt = Annotated[
    Path | None,
    setting_option("bundles_dir", "--bundles", help="bundles folder (default queue: ../jobs.db)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
TimeoutOpt = Annotated[
    float | None,
    setting_option(
        "job_heartbeat_timeout_s", "--heartbeat-timeout", help="seconds before a silent job is failed"
    ),
]


def _url(s: JobSettings) -> str:
    assert s.queue_url is not None  # JobSettings fills it in (beside the bundles folder)
    return s.queue_url


def _fail(error: Exception) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(code=2)


def _parse_option(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f"{item!r}: expected key=value", param_hint="--option")
    try:
        return key, json.loads(raw)  # numbers, true/false, null
    except json.JSONDecodeError:
        return key, raw  # plain strings (index_kind=flat)


JOB_COLUMNS = ("ID", "TYPE", "COLLECTION", "STATE", "DATASET", "PHASE", "STEP", "DETAIL")


def _row(r: JobRecord) -> list[str]:
    p = r.progress
    step = f"{p.step}/{p.total_steps or '?'}" if r.state == "running" else ""
    # a job cancelled before it started kept phase "queued" in records written before the queue said so
    phase = NOT_STARTED if r.state != "queued" and p.phase == "queued" else p.phase
    tail = r.error or (f"bundle {r.bundle_version} live={r.live}" if r.bundle_version else "")
    return [r.id, r.type, r.collection, r.state, r.dataset, phase, step, tail]


@jobs_app.command()
def submit(
    type: Annotated[JobType, typer.Option("--type", help="The job's kind.")],
    dataset: Annotated[str, typer.Option("--dataset", help="dataset name under the data root")],
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="key=value (repeatable)")] = None,
    queue: QueueOpt = None,
    bundles: BundlesOpt = None,
    data_root: Annotated[Path | None, setting_option("data_root", "--data-root")] = None,
    models_root: Annotated[
        Path | None, setting_option("models_root", "--models-root", help="base_model names a folder here")
    ] = None,
    collection: Annotated[
        str | None, collection_option(COLLECTION_HELP + " The job publishes into it; it must exist.")
    ] = None,
) -> None:
    """Queue a job; prints its id."""
    options = dict(_parse_option(o) for o in option or [])
    s = job_settings(queue_url=queue, bundles_dir=bundles, data_root=data_root, models_root=models_root)
    try:
        name = DEFAULT_COLLECTION if collection is None else s.collections().resolve(collection)[0]
        record = JobQueue(_url(s)).submit(
            type,
            dataset,
            options,
            data_root=s.data_root,
            bundles_dir=s.collections().folder(name),
            models_root=s.models_root,
            collection=name,
        )
    except InfonceSearchError as e:
        _fail(e)
    typer.echo(record.id)


@jobs_app.command()
def status(
    job_id: Annotated[str | None, typer.Argument(help="a job id; all recent jobs when omitted")] = None,
    queue: QueueOpt = None,
    bundles: BundlesOpt = None,
    heartbeat_timeout: TimeoutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One job as JSON, or a table of recent jobs (JSON with --json)."""
    s = job_settings(queue_url=queue, bundles_dir=bundles, job_heartbeat_timeout_s=heartbeat_timeout)
    jobs = JobQueue(_url(s), heartbeat_timeout_s=s.job_heartbeat_timeout_s)
    if job_id is None and as_json:
        records = [r.model_dump() for r in jobs.recent()]
        typer.echo(
            json.dumps({"jobs": records, "workers": [w.model_dump() for w in jobs.workers()]}, indent=2)
        )
        return
    if job_id is None:
        recent = jobs.recent()
        for line in text_table(JOB_COLUMNS, map(_row, recent)) if recent else ["no jobs yet"]:
            typer.echo(line)
        alive = [w.id for w in jobs.workers() if w.alive]
        typer.echo(f"workers alive: {', '.join(alive) if alive else 'none'}")
        return
    try:
        typer.echo(json.dumps(jobs.get(job_id).model_dump(), indent=2))
    except InfonceSearchError as e:
        _fail(e)


@jobs_app.command("list")
def list_(
    queue: QueueOpt = None,
    bundles: BundlesOpt = None,
    heartbeat_timeout: TimeoutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A table of recent jobs, newest first (JSON with --json)."""
    status(None, queue, bundles, heartbeat_timeout, as_json)


@jobs_app.command()
def cancel(job_id: str, queue: QueueOpt = None, bundles: BundlesOpt = None) -> None:
    """Cancel a queued job now, or a running one at its next training step."""
    s = job_settings(queue_url=queue, bundles_dir=bundles)
    try:
        record = JobQueue(_url(s)).cancel(job_id)
    except InfonceSearchError as e:
        _fail(e)
    typer.echo(f"{record.id} {record.state}{' (cancel requested)' if record.state == 'running' else ''}")


def worker_settings(
    queue: str | None = None,
    bundles: Path | None = None,
    heartbeat_timeout: float | None = None,
    device: str | None = None,
    log_format: str | None = None,
    milvus_uri: str | None = None,
    milvus_token: str | None = None,
    milvus_name: str | None = None,
) -> JobSettings:
    """The worker's effective settings: JobSettings from the environment, its given options on top."""
    return job_settings(
        queue_url=queue,
        bundles_dir=bundles,
        job_heartbeat_timeout_s=heartbeat_timeout,
        train_device=device,
        log_format=log_format,
        milvus_uri=milvus_uri,
        milvus_token=milvus_token,
        milvus_name=milvus_name,
    )


class WorkerOptions(BaseModel):
    """The worker's Milvus and CPU priority (its options generated from these fields, as `pipeline`'s are)."""

    model_config = ConfigDict(extra="forbid")

    milvus_uri: str | None = Field(
        None,
        description="Milvus for jobs with index_backend=milvus: http://host:19530 or a milvus-lite .db path.",
        json_schema_extra=setting_extra("milvus_uri"),
    )
    milvus_token: str | None = Field(
        None, description="Milvus credentials.", json_schema_extra=setting_extra("milvus_token")
    )
    milvus_name: str | None = Field(
        None, description="Collection/alias prefix.", json_schema_extra=setting_extra("milvus_name")
    )
    progress_interval_s: float = Field(
        HEARTBEAT_INTERVAL_S,
        gt=0,
        description="How often a running job writes its heartbeat, progress (GET /jobs/{id}) and log lines to "
        "its record; at most a third of the heartbeat timeout.",
    )
    nice: int = Field(
        10,
        ge=0,
        le=19,
        description="Lower this worker's CPU priority by this much (os.nice): on a machine shared with the API, "
        "10 keeps searches' latency while a job trains (bench/serving/collections_bench.py: p99 x1.08 during a retrain "
        "at 10, x1.64 at 0); on a machine of its own it costs nothing. 0 = unchanged.",
    )


@with_config_options(WorkerOptions)
def worker(
    queue: QueueOpt = None,
    bundles: BundlesOpt = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="consumer threads")] = 1,
    heartbeat_timeout: TimeoutOpt = None,
    device: Annotated[
        Device | None,
        setting_option(
            "train_device",
            "--device",
            help="Where retrain jobs train unless a job sets its own `device` option.",
        ),
    ] = None,
    log_level: Annotated[LogLevel, log_level_option("SEARCH_LOG_LEVEL")] = "INFO",
    log_format: Annotated[
        LogFormat | None,
        setting_option("log_format", "--log-format", help="text, or json (one object a line)."),
    ] = None,
    **overrides: Any,
) -> None:
    """Run the job worker (huey consumer) until interrupted."""
    from contract.index.backend import BackendConfig
    from training.jobs import tasks
    from training.jobs.worker import check_progress_interval, run_worker

    o = given_config(WorkerOptions, overrides)
    s = worker_settings(
        queue, bundles, heartbeat_timeout, device, log_format, o.milvus_uri, o.milvus_token, o.milvus_name
    )
    try:
        check_progress_interval(o.progress_interval_s, s.job_heartbeat_timeout_s)
    except ValueError as e:
        _fail(e)
    if s.milvus_uri:  # jobs may then ask for index_backend=milvus
        tasks.MILVUS = BackendConfig("milvus", s.milvus_uri, s.milvus_token, s.milvus_name)

    # huey's consumer lines (started, executing, finished) are the worker's own story: keep them at the level
    configure_logging(log_level, s.log_format, also=("huey",))
    silence_progress_bars()  # a job's progress goes to its record; the libraries' bars would only litter the log
    if o.nice:
        os.nice(o.nice)  # training shares the cores with the API: serving goes first
    run_worker(
        _url(s),
        workers=workers,
        heartbeat_timeout_s=s.job_heartbeat_timeout_s,
        device=s.train_device,
        progress_interval_s=o.progress_interval_s,
    )
