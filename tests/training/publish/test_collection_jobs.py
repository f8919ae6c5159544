"""Jobs of several collections on one worker: a busy collection never holds a worker thread, a deleted
collection's job fails without bringing its folder back, each collection publishes under its own Milvus
names. A real SQLite queue and a real worker subprocess; no model (the jobs fail fast for want of a live
bundle, which is all the scheduling needs)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contract.bundles.collections import Collections
from contract.index.backend import BackendConfig
from contract.jobs.queue import CollectionBusy, JobQueue
from training.jobs import tasks

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def setup(tmp_path):
    data = tmp_path / "data" / "small"
    data.mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    collections = Collections(tmp_path / "collections", tmp_path / "bundles")
    for name in ("a", "b"):
        collections.create(name)
    return tmp_path, collections, JobQueue(f"sqlite:///{tmp_path / 'jobs.db'}")


def _submit(queue: JobQueue, tmp_path: Path, collections: Collections, name: str):
    return queue.submit(
        "reindex",
        "small",
        {"index_kind": "flat"},
        data_root=tmp_path / "data",
        bundles_dir=collections.folder(name, must_exist=False),
        collection=name,
    )


def test_a_busy_collections_job_goes_back_to_the_queue_and_another_collection_runs_meanwhile(setup):
    tmp_path, collections, queue = setup
    with open(collections.folder("a") / tasks.LOCK_FILE, "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as if a long job of collection a were running
        job_a = _submit(queue, tmp_path, collections, "a")  # first in the queue
        job_b = _submit(queue, tmp_path, collections, "b")
        log = tmp_path / "worker.log"
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "training", "worker", "--queue", queue.url, "--workers", "1"],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 120
            while queue.get(job_b.id).state in ("queued", "running") and time.monotonic() < deadline:
                time.sleep(0.3)
            b, a = queue.get(job_b.id), queue.get(job_a.id)
            # b ran on the one worker thread although a was ahead of it and cannot run yet
            assert b.state == "failed" and "needs a live bundle" in (b.error or ""), log.read_text()[-2000:]
            assert a.state == "queued" and a.worker is None
            assert a.progress.phase == "waiting: another job of collection a is running"
            fcntl.flock(held.fileno(), fcntl.LOCK_UN)  # a's collection is free: a runs now
            deadline = time.monotonic() + 60
            while queue.get(job_a.id).state == "queued" and time.monotonic() < deadline:
                time.sleep(0.3)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    a = queue.get(job_a.id)
    assert a.state == "failed" and "needs a live bundle" in (a.error or ""), log.read_text()[-2000:]
    assert a.started_at is not None and a.started_at > b.finished_at


def test_execute_hands_a_busy_job_back_and_fails_a_deleted_collections_job(setup):
    tmp_path, collections, queue = setup
    job = _submit(queue, tmp_path, collections, "a")
    with open(collections.folder("a") / tasks.LOCK_FILE, "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(CollectionBusy):
            tasks.execute(job.id, queue.records)
    assert queue.get(job.id).state == "queued"
    gone = _submit(queue, tmp_path, collections, "b")
    collections.purge(collections.retire("b"))
    tasks.execute(gone.id, queue.records)
    record = queue.get(gone.id)
    assert record.state == "failed" and "collection 'b' was deleted" in (record.error or "")
    assert not (collections.root / "b").exists()  # the job did not bring the folder back


def test_each_collection_publishes_under_its_own_milvus_names(monkeypatch):
    monkeypatch.setattr(tasks, "MILVUS", BackendConfig("milvus", "http://milvus:19530", None, "infonce"))
    assert tasks.job_backend("faiss", "docs") is None
    assert tasks.job_backend("milvus").milvus_name == "infonce"  # default: the names of before
    assert tasks.job_backend("milvus", "docs").milvus_name == "infonce_docs"
    dashed = tasks.job_backend("milvus", "my-docs").milvus_name
    assert (
        dashed.startswith("infonce_my_docs_") and dashed != tasks.job_backend("milvus", "my_docs").milvus_name
    )
