"""The live stack a retrain-job test drives: a BEIR slice of the demo data, a first flat bundle published from
the base model at 32 tokens, the real app (TestClient with its lifespan), a real SQLite queue and a real
worker subprocess. Shared by the retrain-job tests so each states only what its job proves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan
from training.data.beir_slice import beir_slice
from training.train.run_hooks import RunHooks

REPO = Path(__file__).resolve().parents[1]
HEARTBEAT_TIMEOUT_S = 15
DATASET = "mini"


@dataclass(frozen=True)
class RetrainStack:
    client: TestClient
    bundles: Path
    data_dir: Path  # the slice the jobs train on (dataset `DATASET`)
    first: str  # the version published before any job ran
    log: Path  # the worker's stdout and stderr
    worker: subprocess.Popen[bytes]


@contextmanager
def retrain_stack(
    root: Path,
    demo_dataset: Path,
    *,
    api_key: str,
    n_train: int,
    n_test: int,
    worker_module: str = "training",
    worker_env: dict[str, str] | None = None,
) -> Iterator[RetrainStack]:
    """Build the slice and the first bundle under `root`, start the worker (`python -m worker_module worker`,
    with `worker_env` added to its environment) and the app; stop the worker on exit."""
    from contract.encoding.encoder import Encoder
    from training.publish.index_model import index_model

    data_root = root / "data"
    beir_slice(demo_dataset, data_root / DATASET, n_train=n_train, n_test=n_test, n_distractors=30)
    base = Encoder.load()
    base.model.max_seq_length = 32
    base.save(root / "base")
    plan = PublishPlan(
        data=DataPlan(data_dir=str(data_root / DATASET)),
        index=IndexPlan(kind="flat"),
        publication=PublicationPlan(bundles_dir=str(root / "bundles"), onnx=False, distill=False),
    )
    first = index_model(root / "base", plan, RunHooks(show_progress=False))
    settings = Settings(
        bundles_dir=root / "bundles", api_key=api_key, data_root=data_root,
        models_root=root / "models", queue_url=f"sqlite:///{root / 'jobs.db'}",
        job_heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, reload_poll_seconds=0.2, microbatch_enabled=False,
    )  # fmt: skip
    log = root / "worker.log"
    with log.open("ab") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", worker_module, "worker", "--queue", settings.queue_url,
             "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT_S)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(worker_env or {})},
        )  # fmt: skip
    try:
        with TestClient(create_app(settings)) as client:
            yield RetrainStack(client, root / "bundles", data_root / DATASET, first.version, log, worker)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
