"""Job queue and records against a real SQLite file and (when redis-server is on PATH) a real Redis.

No model here: these prove submission, validation, cancellation, atomic record updates, the bundle lock
and dead-worker recovery. The model-running paths are in tests/test_jobs_e2e.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from contract.errors import DatasetNotFound, DatasetRefused, JobCancelled, JobConflict, JobOptionsInvalid
from contract.jobs.queue import JobQueue, resolve_dataset
from contract.jobs.records import JobRecord, update
from tests.servers import redis_server
from training.jobs.heartbeat import JobHeartbeat
from training.jobs.tasks import bundle_lock, execute
from training.jobs.worker import fail_dead_jobs


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis"), what="Redis queue variant") as port:
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def queue_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    url = request.getfixturevalue("redis_url")
    import redis

    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture()
def data_root(tmp_path):
    root = tmp_path / "data"
    (root / "small").mkdir(parents=True)
    (root / "small" / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    (tmp_path / "secret").mkdir()
    (root / "escape").symlink_to(tmp_path / "secret")
    return root


def _submit(queue: JobQueue, data_root: Path, tmp_path: Path, **kw) -> JobRecord:
    args = {"job_type": "retrain", "dataset": "small", "options": {"max_steps": 2}} | kw
    return queue.submit(**args, data_root=data_root, bundles_dir=tmp_path / "bundles")


def test_submit_records_a_queued_job_and_enqueues_it(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url)
    record = _submit(queue, data_root, tmp_path, options={"max_steps": 2, "index_kind": "flat"})
    assert record.state == "queued"
    assert record.options == {"max_steps": 2, "index_kind": "flat"}
    assert record.data_dir == str((data_root / "small").resolve())
    assert queue.huey.pending_count() == 1
    # a second process (the API after a restart) sees the same record
    again = JobQueue(queue_url).get(record.id)
    assert again == record
    assert [r.id for r in JobQueue(queue_url).recent()] == [record.id]


@pytest.mark.parametrize("name", ["../secret", "small/../../secret", "escape", "/etc", ""])
def test_dataset_names_outside_the_root_are_refused(data_root, name):
    with pytest.raises(DatasetRefused):
        resolve_dataset(data_root, name)


def test_unknown_dataset_and_bad_options_are_named(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url)
    with pytest.raises(DatasetNotFound, match="'nope'"):
        _submit(queue, data_root, tmp_path, dataset="nope")
    with pytest.raises(JobOptionsInvalid, match=r"options\.max_steps") as err:
        _submit(queue, data_root, tmp_path, options={"max_steps": 0})
    assert err.value.field == "max_steps"
    with pytest.raises(JobOptionsInvalid, match=r"options\.index_kind"):
        _submit(queue, data_root, tmp_path, job_type="reindex", options={"index_kind": "annoy"})
    with pytest.raises(JobOptionsInvalid, match="unknown job type"):
        _submit(queue, data_root, tmp_path, job_type="deploy")
    assert queue.recent() == [] and queue.huey.pending_count() == 0


def test_cancel_queued_job_revokes_it_and_the_worker_skips_it(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url)
    record = _submit(queue, data_root, tmp_path)
    cancelled = queue.cancel(record.id)
    assert cancelled.state == "cancelled" and cancelled.finished_at is not None
    assert queue.huey.is_revoked(record.id)
    assert queue.cancel(record.id).state == "cancelled"  # idempotent
    execute(record.id, queue.records)  # what a worker would do if it still got the message
    after = queue.get(record.id)
    assert after.state == "cancelled" and after.worker is None and after.started_at is None


def test_cancel_of_finished_job_is_a_conflict(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url)
    record = _submit(queue, data_root, tmp_path)
    update(queue.records, record.id, state="succeeded")
    with pytest.raises(JobConflict, match="already succeeded"):
        queue.cancel(record.id)


def test_concurrent_record_updates_are_not_lost(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url)
    record = _submit(queue, data_root, tmp_path)

    def bump(n: int) -> None:
        for i in range(10):
            queue.records.mutate(
                record.id, lambda r, i=i: r.model_copy(update={"log_tail": r.log_tail + [f"{n}-{i}"]})
            )

    threads = [threading.Thread(target=bump, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = queue.get(record.id).log_tail
    assert sorted(lines) == sorted(f"{n}-{i}" for n in range(4) for i in range(10))


def test_running_job_sees_cancel_at_its_next_step(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url)
    record = _submit(queue, data_root, tmp_path)
    update(queue.records, record.id, state="running")
    heartbeat = JobHeartbeat(queue.records, record.id)
    heartbeat.on_progress({"step": 1, "total_steps": 5, "loss": 1.5})  # no cancel yet: returns
    assert queue.cancel(record.id).state == "running"  # running jobs end at their next step
    heartbeat.beat()
    with pytest.raises(JobCancelled):
        heartbeat.on_progress({"step": 2, "total_steps": 5, "loss": 1.4})
    heartbeat.beat()  # the heartbeat thread writes the latest progress
    progress = queue.get(record.id).progress
    assert (progress.step, progress.total_steps, progress.loss) == (2, 5, 1.4)


def test_bundle_lock_serialises_and_a_waiting_job_can_be_cancelled(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url)
    bundles = tmp_path / "bundles"
    waiting = _submit(queue, data_root, tmp_path)
    heartbeat = JobHeartbeat(queue.records, waiting.id)
    outcome: list[str] = []

    def second() -> None:
        try:
            with bundle_lock(bundles, heartbeat):
                outcome.append("acquired")
        except JobCancelled:
            outcome.append("cancelled")

    with bundle_lock(bundles, JobHeartbeat(queue.records, "unused")):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(1.0)
        assert outcome == []  # still waiting for the first holder
        queue.cancel(waiting.id)
        thread.join(timeout=10)
    assert outcome == ["cancelled"]
    # once released, the lock can be taken again
    with bundle_lock(bundles, heartbeat):
        pass


def test_dead_worker_jobs_fail_on_restart_and_stale_heartbeats_read_as_failed(queue_url, data_root, tmp_path):
    queue = JobQueue(queue_url, heartbeat_timeout_s=30)
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    killed = _submit(queue, data_root, tmp_path)
    update(queue.records, killed.id, state="running", worker=f"{host}:{dead.pid}", heartbeat_at=time.time())
    alive = _submit(queue, data_root, tmp_path)
    update(
        queue.records, alive.id, state="running", worker=f"{host}:{os.getppid()}", heartbeat_at=time.time()
    )
    silent = _submit(queue, data_root, tmp_path)
    update(queue.records, silent.id, state="running", worker="elsewhere:1", heartbeat_at=time.time() - 60)

    # before any worker restarts, readers already report the silent one as failed
    assert queue.get(silent.id).state == "failed"
    assert "heartbeat expired" in (queue.get(silent.id).error or "")
    assert queue.get(killed.id).state == "running"

    failed = fail_dead_jobs(queue.records, timeout_s=30, at_start=True)
    assert set(failed) == {killed.id, silent.id}
    assert "worker restarted" in (queue.records.get(killed.id).error or "")
    assert queue.records.get(silent.id).state == "failed"  # now stored, not only derived
    assert queue.records.get(alive.id).state == "running"


def test_a_real_worker_consumes_the_queue_and_records_the_outcome(queue_url, data_root, tmp_path):
    """`python -m training worker` on this URL picks the job up and writes its final state; here a reindex
    into an empty bundles folder, which must fail with a clear reason (no live model to re-encode with)."""
    queue = JobQueue(queue_url)
    record = _submit(queue, data_root, tmp_path, job_type="reindex", options={"index_kind": "flat"})
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "training", "worker", "--queue", queue_url],
            cwd=Path(__file__).resolve().parents[3],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while queue.get(record.id).state in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.3)
        workers = queue.workers()  # the idle worker's own heartbeat
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    job = queue.get(record.id)
    assert job.state == "failed", log.read_text()[-2000:]
    assert "needs a live bundle" in (job.error or "")
    assert job.worker is not None and job.started_at is not None and job.finished_at is not None
    assert any("failed" in line for line in job.log_tail)
    assert queue.huey.pending_count() == 0
    assert [w.alive for w in workers] == [True] and workers[0].id.endswith(f":{worker.pid}")


def test_cli_submit_status_cancel_with_the_api_environment_variables(tmp_path, data_root):
    """The CLI reads SEARCH_QUEUE_URL / SEARCH_DATA_ROOT / SEARCH_BUNDLES_DIR like the API does."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    env = {
        **os.environ,
        "SEARCH_QUEUE_URL": url,
        "SEARCH_DATA_ROOT": str(data_root),
        "SEARCH_BUNDLES_DIR": str(tmp_path / "bundles"),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "training", "jobs", *args],
            env=env,
            cwd=Path(__file__).resolve().parents[3],
            capture_output=True,
            text=True,
            timeout=120,
        )

    submitted = cli(
        "submit", "--type", "retrain", "--dataset", "small", "-o", "max_steps=2", "-o", "index_kind=flat"
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert JobQueue(url).get(job_id).options == {"max_steps": 2, "index_kind": "flat"}
    status = cli("status", job_id)
    assert status.returncode == 0 and '"state": "queued"' in status.stdout
    assert job_id in cli("status").stdout
    cancelled = cli("cancel", job_id)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert JobQueue(url).get(job_id).state == "cancelled"

    refused = cli("submit", "--type", "retrain", "--dataset", "../secret")
    assert refused.returncode == 2 and "outside the data root" in refused.stderr
    assert "Traceback" not in refused.stderr
    bad = cli("submit", "--type", "retrain", "--dataset", "small", "-o", "max_steps=zero")
    assert bad.returncode == 2 and "options.max_steps" in bad.stderr
    missing = cli("status", "nope")
    assert missing.returncode == 2 and "no job with id 'nope'" in missing.stderr


def test_jobs_choose_the_index_backend_and_the_worker_says_where_milvus_is():
    from contract.errors import JobOptionsInvalid
    from contract.jobs.queue import ReindexOptions, RetrainOptions, validate_options
    from training.jobs import tasks

    assert validate_options("reindex", {"index_backend": "milvus"}) == {"index_backend": "milvus"}
    assert RetrainOptions(index_backend="milvus").index_backend == "milvus"
    with pytest.raises(JobOptionsInvalid, match="index_backend"):
        validate_options("reindex", {"index_backend": "elastic"})
    assert ReindexOptions().index_backend == "faiss" and tasks.job_backend("faiss") is None
    with pytest.raises(JobOptionsInvalid, match="no Milvus"):
        tasks.job_backend("milvus")  # this worker was started without --milvus-uri


def test_a_phase_reports_its_fraction_and_an_eta_from_its_own_rate(
    queue_url, data_root, tmp_path, monkeypatch
):
    """Issue 44 item 3: the heartbeat turns a phase's count into a fraction and the time left at that
    phase's rate so far; a new phase restarts the clock (a corpus encode and a distillation run at rates
    minutes apart). The clock is the heartbeat's time.time, stepped by hand."""
    import training.jobs.heartbeat as hb

    queue = JobQueue(queue_url)
    record = _submit(queue, data_root, tmp_path)
    clock = [1000.0]
    monkeypatch.setattr(hb.time, "time", lambda: clock[0])
    heartbeat = JobHeartbeat(queue.records, record.id)
    heartbeat.phase_progress("encode corpus", 0, 1000)
    clock[0] += 10
    heartbeat.phase_progress("encode corpus", 250, 1000)  # 25 docs/s: 750 left -> 30 s
    heartbeat.beat()
    p = queue.get(record.id).progress
    assert (p.phase, p.step, p.total_steps, p.fraction) == ("encode corpus", 250, 1000, 0.25)
    assert p.eta_s == pytest.approx(30.0) and p.phase_started_at == 1000.0
    clock[0] += 5
    heartbeat.phase_progress("index + bundle", 0, None)  # not counted: no fraction, no ETA
    heartbeat.beat()
    p = queue.get(record.id).progress
    assert (p.phase, p.fraction, p.eta_s, p.phase_started_at) == ("index + bundle", None, None, 1015.0)
    clock[0] += 4
    heartbeat.on_progress({"step": 1, "total_steps": 5, "loss": 2.0})  # training: its own clock
    clock[0] += 2
    heartbeat.on_progress({"step": 2, "total_steps": 5, "loss": 1.5})  # 2 steps in 2 s: 3 left -> 3 s
    heartbeat.beat()
    p = queue.get(record.id).progress
    assert (p.phase, p.fraction, p.loss) == ("train", 0.4, 1.5) and p.eta_s == pytest.approx(3.0)
    update(queue.records, record.id, state="running", started_at=1000.0)
    heartbeat.finish({"state": "succeeded"})
    done = queue.get(record.id)
    assert (done.progress.phase, done.progress.fraction, done.progress.eta_s) == ("succeeded", 1.0, None)
    assert done.duration_s == pytest.approx(clock[0] - 1000.0)
