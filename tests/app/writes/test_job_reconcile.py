"""Issue 43, item 6: a job killed (kill -9) after its version went live, before it could write its outcome,
read `failed` with no bundle_version while CURRENT named its version, so an operator would resubmit it.
The worker's restart sweep now mends the record from the bundles folder: succeeded, with that version.

The record is left exactly as a killed worker leaves it (running, its pid gone, the bundle published and
CURRENT moved by the real store), on a real SQLite queue, and the real sweep runs."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from contract.bundles.folder import BundleFolder
from contract.jobs.queue import JobQueue
from contract.jobs.records import JobRecord, update
from tests.app.conftest import publish
from training.jobs.worker import fail_dead_jobs


@pytest.fixture()
def queue(tmp_path):
    (tmp_path / "data" / "small").mkdir(parents=True)
    (tmp_path / "data" / "small" / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    return JobQueue(f"sqlite:///{tmp_path / 'jobs.db'}", heartbeat_timeout_s=30)


def _killed_job(queue: JobQueue, tmp_path) -> JobRecord:
    """A reindex job whose worker process is gone (a pid that has exited), as kill -9 leaves it."""
    job = queue.submit("reindex", "small", {}, data_root=tmp_path / "data", bundles_dir=tmp_path / "bundles")
    dead = subprocess.Popen(["true"])
    dead.wait()
    started = time.time() - 1
    update(
        queue.records,
        job.id,
        state="running",
        worker=f"{socket.gethostname()}:{dead.pid}",
        started_at=started,
        heartbeat_at=started,
    )
    return job


def test_a_job_killed_after_its_version_went_live_reads_succeeded(queue, tmp_path, staged):
    job = _killed_job(queue, tmp_path)
    version = publish(staged["A"], tmp_path / "bundles")  # the job's own publication, then the kill
    assert BundleFolder(tmp_path / "bundles").current_version() == version

    assert fail_dead_jobs(queue.records, timeout_s=30, at_start=True) == [job.id]
    record = queue.records.get(job.id)
    assert record.state == "succeeded" and record.error is None, record
    assert record.bundle_version == version and record.live is True
    assert "worker restarted" in record.log_tail[-1] and version in record.log_tail[-1]


def test_a_record_an_older_sweep_failed_is_mended_at_the_next_start(queue, tmp_path, staged):
    job = _killed_job(queue, tmp_path)
    version = publish(staged["A"], tmp_path / "bundles")
    # what the sweep of before this fix wrote: failed, no version
    update(
        queue.records, job.id, state="failed", error="worker died: worker restarted", finished_at=time.time()
    )

    fail_dead_jobs(queue.records, timeout_s=30, at_start=True)
    record = queue.records.get(job.id)
    assert (record.state, record.bundle_version) == ("succeeded", version)


def test_a_job_killed_before_publishing_stays_failed(queue, tmp_path, staged):
    publish(staged["A"], tmp_path / "bundles")  # an earlier version, published before the job started
    time.sleep(0.05)
    job = _killed_job(queue, tmp_path)
    update(queue.records, job.id, started_at=time.time())

    fail_dead_jobs(queue.records, timeout_s=30, at_start=True)
    record = queue.records.get(job.id)
    assert (record.state, record.bundle_version) == ("failed", None)
    assert "worker restarted" in (record.error or "")
