"""`python -m training jobs submit|status|list|cancel` and `python -m training worker`.

They talk to the queue and the records directly (no HTTP), with the same settings the API reads:
`--queue` / SEARCH_QUEUE_URL, `--data-root` / SEARCH_DATA_ROOT, `--bundles` / SEARCH_BUNDLES_DIR.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from contract.errors import InfonceSearchError
from contract.jobs.queue import DEFAULT_HEARTBEAT_TIMEOUT_S, JobQueue, default_queue_url
from contract.jobs.records import JobRecord
from contract.log_setup import LogFormat, configure_logging
from training.cli_choices import Device, JobType, LogLevel, log_level_option

jobs_app = typer.Typer(help="Submit, follow and cancel retrain/reindex jobs.", no_args_is_help=True)

QueueOpt = Annotated[
    str | None,
    typer.Option("--queue", envvar="SEARCH_QUEUE_URL", help="sqlite:///path/jobs.db or redis://host:port/db"),
]
BundlesOpt = Annotated[
    Path,
    typer.Option("--bundles", envvar="SEARCH_BUNDLES_DIR", help="bundles folder (default queue: ../jobs.db)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--heartbeat-timeout",
        envvar="SEARCH_JOB_HEARTBEAT_TIMEOUT_S",
        help="seconds before a silent job is failed",
    ),
]


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


def _line(r: JobRecord) -> str:
    p = r.progress
    step = f"{p.step}/{p.total_steps or '?'}" if r.state == "running" else ""
    tail = r.error or (f"bundle {r.bundle_version} live={r.live}" if r.bundle_version else "")
    return f"{r.id}  {r.type:<8} {r.state:<10} {r.dataset:<20} {p.phase:<10} {step:<8} {tail}"


@jobs_app.command()
def submit(
    type: Annotated[JobType, typer.Option("--type", help="The job's kind.")],
    dataset: Annotated[str, typer.Option("--dataset", help="dataset name under the data root")],
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="key=value (repeatable)")] = None,
    queue: QueueOpt = None,
    bundles: BundlesOpt = Path("bundles"),
    data_root: Annotated[Path, typer.Option("--data-root", envvar="SEARCH_DATA_ROOT")] = Path("data"),
    models_root: Annotated[
        Path,
        typer.Option("--models-root", envvar="SEARCH_MODELS_ROOT", help="base_model names a folder here"),
    ] = Path("models"),
) -> None:
    """Queue a job; prints its id."""
    options = dict(_parse_option(o) for o in option or [])
    try:
        record = JobQueue(queue or default_queue_url(bundles)).submit(
            type, dataset, options, data_root=data_root, bundles_dir=bundles, models_root=models_root
        )
    except InfonceSearchError as e:
        _fail(e)
    typer.echo(record.id)


@jobs_app.command()
def status(
    job_id: Annotated[str | None, typer.Argument(help="a job id; all recent jobs when omitted")] = None,
    queue: QueueOpt = None,
    bundles: BundlesOpt = Path("bundles"),
    heartbeat_timeout: TimeoutOpt = DEFAULT_HEARTBEAT_TIMEOUT_S,
    as_json: JsonOpt = False,
) -> None:
    """One job as JSON, or a table of recent jobs (JSON with --json)."""
    jobs = JobQueue(queue or default_queue_url(bundles), heartbeat_timeout_s=heartbeat_timeout)
    if job_id is None and as_json:
        records = [r.model_dump() for r in jobs.recent()]
        typer.echo(
            json.dumps({"jobs": records, "workers": [w.model_dump() for w in jobs.workers()]}, indent=2)
        )
        return
    if job_id is None:
        for r in jobs.recent():
            typer.echo(_line(r))
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
    bundles: BundlesOpt = Path("bundles"),
    heartbeat_timeout: TimeoutOpt = DEFAULT_HEARTBEAT_TIMEOUT_S,
    as_json: JsonOpt = False,
) -> None:
    """A table of recent jobs, newest first (JSON with --json)."""
    status(None, queue, bundles, heartbeat_timeout, as_json)


@jobs_app.command()
def cancel(job_id: str, queue: QueueOpt = None, bundles: BundlesOpt = Path("bundles")) -> None:
    """Cancel a queued job now, or a running one at its next training step."""
    try:
        record = JobQueue(queue or default_queue_url(bundles)).cancel(job_id)
    except InfonceSearchError as e:
        _fail(e)
    typer.echo(f"{record.id} {record.state}{' (cancel requested)' if record.state == 'running' else ''}")


def worker(
    queue: QueueOpt = None,
    bundles: BundlesOpt = Path("bundles"),
    workers: Annotated[int, typer.Option("--workers", min=1, help="consumer threads")] = 1,
    heartbeat_timeout: TimeoutOpt = DEFAULT_HEARTBEAT_TIMEOUT_S,
    device: Annotated[
        Device,
        typer.Option(
            "--device",
            envvar="SEARCH_TRAIN_DEVICE",
            help="Where retrain jobs train unless a job sets its own `device` option.",
        ),
    ] = "auto",
    log_level: Annotated[LogLevel, log_level_option("SEARCH_LOG_LEVEL")] = "INFO",
    log_format: Annotated[
        LogFormat,
        typer.Option("--log-format", envvar="SEARCH_LOG_FORMAT", help="text, or json (one object a line)."),
    ] = "text",
    milvus_uri: Annotated[
        str | None,
        typer.Option(
            "--milvus-uri",
            envvar="SEARCH_MILVUS_URI",
            help="Milvus for jobs with index_backend=milvus: http://host:19530 or a milvus-lite .db path.",
        ),
    ] = None,
    milvus_token: Annotated[
        str | None, typer.Option("--milvus-token", envvar="SEARCH_MILVUS_TOKEN", help="Milvus credentials.")
    ] = None,
    milvus_name: Annotated[
        str, typer.Option("--milvus-name", envvar="SEARCH_MILVUS_NAME", help="Collection/alias prefix.")
    ] = "infonce",
) -> None:
    """Run the job worker (huey consumer) until interrupted."""
    from contract.index_backend import BackendConfig
    from training.jobs import tasks
    from training.jobs.worker import run_worker

    if milvus_uri:  # jobs may then ask for index_backend=milvus
        tasks.MILVUS = BackendConfig("milvus", milvus_uri, milvus_token, milvus_name)

    # huey's consumer lines (started, executing, finished) are the worker's own story: keep them at the level
    configure_logging(log_level, log_format, also=("huey",))
    run_worker(
        queue or default_queue_url(bundles),
        workers=workers,
        heartbeat_timeout_s=heartbeat_timeout,
        device=device,
    )
