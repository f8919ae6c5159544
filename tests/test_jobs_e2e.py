"""Retrain and reindex end to end: the real app, a real worker subprocess, a real SQLite queue.

Data: a seeded slice of the demo dataset (40 train queries, 20 test queries, ~120 documents) written as a BEIR folder
under a temporary data root. The first live bundle is the base model indexed on it; jobs then train for
two steps (max_seq_length 32) and publish through the quality gate. The worker runs two consumer
threads, so two retrains running one after the other proves the bundle lock, not a single thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from safetensors.numpy import load_file

from app.main import create_app
from app.settings import Settings
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan
from contract.jobs.queue import JobQueue
from contract.jobs.records import HEARTBEAT_INTERVAL_S
from tests.app.conftest import wait_until
from training.data.beir_slice import beir_slice
from training.jobs.tasks import WORK_DIR
from training.train.run_hooks import RunHooks

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
KEY = {"X-API-Key": "e2e-key"}
HEARTBEAT_TIMEOUT_S = 15
# the records are read while a few training steps run: at the default 2 s a fast machine may finish them
# between two beats (CI once saw one fraction only)
PROGRESS_INTERVAL_S = 0.1
# lr is tiny so the two-step candidate's test nDCG stays within the gate's tolerance of the base model
# (these tests are about the job machinery; training quality has its own tests)
# onnx off: ONNX export is covered by tests/app/search/test_onnx.py and test_indexing; here it would only add time
QUICK = {
    "max_steps": 2,
    "max_seq_length": 32,
    "batch_size": 8,
    "lr": 1e-7,
    "eval_max_queries": 20,
    "onnx": False,
    "distill": False,  # the static tower is on by default; tests/training/distill/test_distill.py covers it
}
# many steps, so there is time to cancel or kill it mid-training
LONG = {
    "epochs": 200,
    "max_seq_length": 32,
    "batch_size": 4,
    "lr": 1e-7,
    "eval_max_queries": 5,
    "report": False,
    "distill": False,
}


class Worker:
    """`python -m training worker` as a subprocess, its output in a log file."""

    def __init__(self, queue_url: str, log: Path):
        self.queue_url, self.log = queue_url, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "training", "worker", "--queue", self.queue_url, "--workers", "2",
                 "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT_S), "--progress-interval-s", str(PROGRESS_INTERVAL_S)],
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def env(tmp_path_factory, demo_dataset) -> Iterator[dict[str, Any]]:
    from contract.encoding.encoder import Encoder
    from training.publish.index_model import index_model

    root = tmp_path_factory.mktemp("jobs-e2e")
    data_root = root / "data"
    beir_slice(demo_dataset, data_root / "pydocs-mini", n_train=40, n_test=20, n_distractors=30)
    base = Encoder.load()
    base.model.max_seq_length = 32  # the bundles keep it: every encode in these tests stays cheap
    base.save(root / "models" / "base-model")  # jobs may name base models under the models root only
    first = index_model(
        root / "models" / "base-model",
        PublishPlan(
            data=DataPlan(data_dir=str(data_root / "pydocs-mini")),
            index=IndexPlan(kind="flat"),
            publication=PublicationPlan(bundles_dir=str(root / "bundles"), onnx=False, distill=False),
        ),
        RunHooks(show_progress=False),
    )
    assert first.live
    settings = Settings(
        bundles_dir=root / "bundles",
        api_key=KEY["X-API-Key"],
        data_root=data_root,
        models_root=root / "models",
        queue_url=f"sqlite:///{root / 'jobs.db'}",
        job_heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
        reload_poll_seconds=0.2,
        microbatch_enabled=False,
    )
    worker = Worker(settings.queue_url, root / "worker.log")
    worker.start()
    try:
        with TestClient(create_app(settings)) as client:
            yield {"client": client, "bundles": root / "bundles", "worker": worker, "first": first.version,
                   "base": "base-model",
                   "settings": settings}  # fmt: skip
    finally:
        worker.stop()


def _wait(what: str, check: Callable[[], Any], worker: Worker, timeout: float = 300) -> Any:
    return wait_until(check, timeout, what, interval=0.3, detail=lambda: f"worker log:\n{worker.tail()}")


def _submit(env: dict[str, Any], job_type: str, options: dict[str, Any]) -> str:
    if job_type == "retrain":  # start from the 32-token base model: every encode stays cheap
        options = {"base_model": env["base"]} | options
    body = {"type": job_type, "dataset": "pydocs-mini", "options": options}
    r = env["client"].post("/jobs", json=body, headers=KEY)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _job(client: TestClient, job_id: str) -> dict[str, Any]:
    return client.get(f"/jobs/{job_id}", headers=KEY).json()  # the detail (log tail, outcome) needs the key


def _finished(client: TestClient, job_id: str) -> dict[str, Any] | None:
    job = _job(client, job_id)
    return job if job["state"] in ("succeeded", "failed", "cancelled") else None


def _training(job: dict[str, Any]) -> bool:
    """Past its first training step (earlier phases count documents encoded, not steps)."""
    return job["progress"]["phase"] == "train" and job["progress"]["step"] >= 1


def _current(bundles: Path) -> str:
    return (bundles / "CURRENT").read_text().strip()


def _versions(bundles: Path) -> set[str]:
    return {p.name for p in bundles.iterdir() if p.is_dir() and not p.name.startswith(".")}


def _served_version(client: TestClient) -> str:
    r = client.post("/search", json={"query": "vitamin d and bone density", "top_k": 3})
    assert r.status_code == 200, r.text
    return r.json()["version"]


def test_two_retrains_run_one_after_the_other_and_the_app_serves_the_result(env):
    client, worker, bundles = env["client"], env["worker"], env["bundles"]
    assert _served_version(client) == env["first"]
    ids = [_submit(env, "retrain", QUICK) for _ in range(2)]
    jobs = [_wait(f"job {i}", lambda i=i: _finished(client, i), worker) for i in ids]

    for job in jobs:
        assert job["state"] == "succeeded", (job, worker.tail())
        # the last phase's count stays; a finished job reads whole, with how long it ran
        assert job["progress"]["phase"] == "succeeded" and job["progress"]["fraction"] == 1.0
        assert job["duration_s"] == pytest.approx(job["finished_at"] - job["started_at"], abs=1e-2)
        assert job["bundle_version"] and job["live"] is True and job["gate_reason"]
        assert job["log_tail"]
    first, second = sorted(jobs, key=lambda j: j["started_at"])
    assert first["finished_at"] <= second["started_at"], "the bundle lock let two retrains overlap"
    assert _current(bundles) == second["bundle_version"]
    _wait(
        "the app to swap in the new bundle",
        lambda: _served_version(client) == second["bundle_version"],
        worker,
        60,
    )


def test_reindex_publishes_the_live_model_into_a_new_bundle(env):
    client, worker, bundles = env["client"], env["worker"], env["bundles"]
    live = _current(bundles)
    job_id = _submit(env, "reindex", {"index_kind": "flat", "onnx": False, "distill": False})
    job = _wait("reindex", lambda: _finished(client, job_id), worker)
    assert job["state"] == "succeeded", (job, worker.tail())
    assert job["live"] is True and job["bundle_version"] != live
    # the same weights as the bundle it re-encoded with: a reindex never trains
    old = load_file(str(bundles / live / "model" / "model.safetensors"))
    new = load_file(str(bundles / job["bundle_version"] / "model" / "model.safetensors"))
    assert old.keys() == new.keys() and all(np.array_equal(old[k], new[k]) for k in old)
    _wait(
        "the app to serve the reindexed bundle",
        lambda: _served_version(client) == job["bundle_version"],
        worker,
        60,
    )


def test_a_running_job_shows_a_moving_fraction_an_eta_and_at_the_end_its_duration(env):
    """Issue 44 item 3: a reindex read phase "index" and an empty bar for ten minutes. Every counted phase
    (training steps here, the corpus encode, the distillation) writes its fraction and an ETA from its own
    rate to the record, every heartbeat; a finished job has its duration. Read through GET /jobs/{id}
    without the key: the progress is public."""
    client, worker = env["client"], env["worker"]
    job_id = _submit(env, "retrain", QUICK | {"max_steps": 8, "batch_size": 4, "report": False})
    seen: list[dict[str, Any]] = []
    beats: set[float] = set()  # the running job's heartbeat stamps (the detail, with the key)

    def finished() -> dict[str, Any] | None:
        job = client.get(f"/jobs/{job_id}").json()
        seen.append(job)
        detail = _job(client, job_id)
        if detail["state"] == "running" and detail["heartbeat_at"]:
            beats.add(detail["heartbeat_at"])
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    job = wait_until(finished, 600, "the job", interval=0.2, detail=worker.tail)
    assert job["state"] == "succeeded", (job, worker.tail())
    # the worker beats at its --progress-interval-s: more stamps than the 2 s default could have written
    span = max(beats) - min(beats)
    assert len(beats) > span / HEARTBEAT_INTERVAL_S + 1, (len(beats), span)
    training = [j["progress"] for j in seen if j["state"] == "running" and j["progress"]["phase"] == "train"]
    fractions = [p["fraction"] for p in training if p["fraction"]]
    assert len(set(fractions)) >= 2 and fractions == sorted(fractions), fractions  # it moved, forward
    assert all(0 < f <= 1 for f in fractions)
    assert all(p["fraction"] == pytest.approx(p["step"] / p["total_steps"]) for p in training if p["step"])
    etas = [p["eta_s"] for p in training if p["eta_s"] is not None and p["step"] < p["total_steps"]]
    assert etas and all(e > 0 for e in etas), training
    assert all(p["phase_started_at"] for p in training)
    phases = [j["progress"]["phase"] for j in seen if j["state"] == "running"]
    assert len(set(phases)) >= 2, phases  # the phases after training name themselves too
    assert job["progress"]["fraction"] == 1.0 and job["progress"]["eta_s"] is None
    assert job["duration_s"] == pytest.approx(job["finished_at"] - job["started_at"], abs=1e-2)
    assert job["duration_s"] > 0


def test_cancel_mid_training_publishes_nothing(env):
    client, worker, bundles = env["client"], env["worker"], env["bundles"]
    live, versions = _current(bundles), _versions(bundles)
    job_id = _submit(env, "retrain", LONG)
    _wait("training to start", lambda: _training(_job(client, job_id)), worker)
    r = client.post(f"/jobs/{job_id}/cancel", headers=KEY)
    assert r.status_code == 200 and r.json()["cancel_requested"]
    job = _wait("the cancel", lambda: _finished(client, job_id), worker, 120)
    assert job["state"] == "cancelled", (job, worker.tail())
    assert job["bundle_version"] is None
    assert job["progress"]["step"] < job["progress"]["total_steps"]
    assert _current(bundles) == live and _versions(bundles) == versions


def test_kill_9_mid_run_keeps_the_old_bundle_and_fails_the_job(env):
    client, worker, bundles = env["client"], env["worker"], env["bundles"]
    live, versions = _current(bundles), _versions(bundles)
    job_id = _submit(env, "retrain", LONG)
    _wait("training to start", lambda: _training(_job(client, job_id)), worker)
    worker.kill9()

    assert _current(bundles) == live and _versions(bundles) == versions
    # the killed job's private folder (its base model copy, its run) outlives it, under the bundles folder
    left = sorted((bundles / WORK_DIR).iterdir())
    assert [p.name[: len("job-") + 8] for p in left] == [f"job-{job_id[:8]}"], left
    assert _served_version(client) == live
    # no worker is running: the API itself reports the job failed once its heartbeat expires
    job = _wait("heartbeat expiry", lambda: _finished(client, job_id), worker, HEARTBEAT_TIMEOUT_S + 30)
    assert job["state"] == "failed" and "heartbeat expired" in job["error"]

    # a restarted worker records the failure for good, and the job can be resubmitted
    worker.start()
    records = JobQueue(env["settings"].queue_url).records
    stored = _wait("the restarted worker to fail the job", lambda: records.get(job_id).state == "failed" and
                   records.get(job_id), worker, 120)  # fmt: skip
    assert "worker died" in (stored.error or "")
    again = _submit(env, "retrain", QUICK)
    job = _wait("the resubmitted job", lambda: _finished(client, again), worker)
    assert job["state"] == "succeeded", (job, worker.tail())
    assert _current(bundles) == job["bundle_version"]
    # the next job of the collection swept the dead one's folder, and removed its own when it finished
    assert not any(p.exists() for p in left) and list((bundles / WORK_DIR).iterdir()) == []
    swept = [line for line in worker.log.read_text(errors="replace").splitlines() if "did not finish" in line]
    assert len(swept) == 1 and f"job-{job_id[:8]}" in swept[0], swept


def test_a_retrain_of_one_collection_goes_live_only_there(env):
    """A job submitted under /collections/other/ trains and publishes into that collection's folder; the
    default collection keeps its CURRENT and goes on serving it, and the app swaps `other` alone."""
    from contract.bundles.collections import Collections
    from training.publish.index_model import index_model

    client, worker, bundles, settings = env["client"], env["worker"], env["bundles"], env["settings"]
    folder = Collections(settings.collections_root, bundles).create("other")
    first = index_model(
        settings.models_root / env["base"],
        PublishPlan(
            data=DataPlan(data_dir=str(settings.data_root / "pydocs-mini")),
            index=IndexPlan(kind="flat"),
            publication=PublicationPlan(bundles_dir=str(folder), onnx=False, distill=False),
        ),
        RunHooks(show_progress=False),
    )
    default_current = _current(bundles)
    other = client.post("/collections/other/search", json={"query": "vitamin d", "top_k": 3})
    assert other.status_code == 200 and other.json()["version"] == first.version
    body = {"type": "retrain", "dataset": "pydocs-mini", "options": {"base_model": env["base"]} | QUICK}
    r = client.post("/collections/other/jobs", json=body, headers=KEY)
    assert r.status_code == 202 and r.json()["collection"] == "other", r.text
    job = _wait("the collection's retrain", lambda: _finished(client, r.json()["id"]), worker)
    assert job["state"] == "succeeded" and job["live"] is True, (job, worker.tail())
    assert _current(folder) == job["bundle_version"] != first.version
    assert _current(bundles) == default_current  # the default collection was not touched
    assert job["bundle_version"] not in _versions(bundles)
    _wait(
        "the app to swap collection other",
        lambda: (
            client.post("/collections/other/search", json={"query": "x"}).json()["version"]
            == job["bundle_version"]
        ),
        worker,
        60,
    )
    assert _served_version(client) == default_current
