"""Jobs never read a file outside the data root, nor a model outside the models root (issue 11, item 1),
and the job listings show strangers state and progress only (item 2).

An audit hook records every `open` this process makes, so "refused" also means "never opened": the
outside file is planted with a secret, and the tests assert its path never reached `open` — in the API
(submission) and in the worker's task body (`execute`, run in-process on a real SQLite queue).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from contract.jobs.queue import JobQueue, ReindexOptions
from contract.jobs.records import update
from training.jobs.tasks import execute

KEY = {"X-API-Key": "k3y"}
PUBLIC_FIELDS = {
    "id",
    "type",
    "state",
    "progress",
    "cancel_requested",
    "created_at",
    "started_at",
    "finished_at",
    "duration_s",  # finished_at - started_at, shown on the Jobs tab to everyone who sees the times
    "collection",  # a collection name, as public as GET /collections lists it
}
_OPENED: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_audit)  # hooks cannot be removed; it only appends paths to a list


@pytest.fixture()
def env(tmp_path):
    data = tmp_path / "data"
    beir = data / "mini"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "title": "t", "text": "x"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "q"}\n')
    (beir / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    (beir / "qrels" / "train.tsv").write_text("q1\td1\t1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.tsv"
    secret.write_text("SECRET-FIRST-COLUMN\td1\t1\n")
    # a dataset whose corpus is a link to a file outside the root (the top-level name is inside)
    linked = data / "linked"
    (linked / "qrels").mkdir(parents=True)
    (linked / "corpus.jsonl").symlink_to(secret)
    (linked / "queries.jsonl").write_text('{"_id": "q1", "text": "q"}\n')
    (linked / "qrels" / "test.tsv").symlink_to(secret)
    models = tmp_path / "models"
    models.mkdir()
    (models / "mine").mkdir()
    (outside / "model").mkdir()
    (models / "escape").symlink_to(outside / "model")
    settings = Settings(
        bundles_dir=tmp_path / "bundles",
        api_key="k3y",
        data_root=data,
        models_root=models,
        queue_url=f"sqlite:///{tmp_path / 'jobs.db'}",
        reload_poll_seconds=0,
    )
    with TestClient(create_app(settings)) as client:
        yield client, settings, outside


def _opened_under(folder: Path) -> list[str]:
    root = os.path.realpath(folder)
    return [p for p in _OPENED if p.startswith(root)]


def _post(client, dataset="mini", options=None, job_type="retrain"):
    body = {"type": job_type, "dataset": dataset, "options": options or {}}
    return client.post("/jobs", json=body, headers=KEY)


@pytest.mark.parametrize(
    ("dataset", "options", "code"),
    [
        ("linked", {}, "dataset_refused"),  # corpus.jsonl and qrels/test.tsv link outside
        ("mini", {"train_split": "../../../outside/secret"}, "dataset_refused"),
        ("mini", {"eval_split": "../../outside/secret"}, "dataset_refused"),
        ("mini", {"eval_split": "/abs/secret"}, "dataset_refused"),
        ("mini", {"base_model": "/etc"}, "model_refused"),
        ("mini", {"base_model": "../outside/model"}, "model_refused"),
        ("mini", {"base_model": "escape"}, "model_refused"),  # a link inside the models root leading out
    ],
)
def test_exfiltration_attempts_are_400_and_nothing_outside_is_opened(env, dataset, options, code):
    client, _, outside = env
    _OPENED.clear()
    r = _post(client, dataset, options)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == code
    assert "SECRET" not in r.text and str(outside) not in r.text
    assert _opened_under(outside) == []
    assert client.get("/jobs", headers=KEY).json()["jobs"] == []


def test_reindex_of_a_linked_dataset_is_refused_too(env):
    client, _, outside = env
    _OPENED.clear()
    r = _post(client, "linked", {"force": True}, job_type="reindex")
    assert r.status_code == 400 and r.json()["error"]["code"] == "dataset_refused"
    assert _opened_under(outside) == []


def test_allowed_models_and_splits_are_accepted(env):
    client, _, _ = env
    for options in ({"base_model": "all-MiniLM-L6-v2"}, {"base_model": "mine"}, {"eval_split": "test"}):
        assert _post(client, options=options).status_code == 202, options
    r = _post(client, options={"base_model": "missing"})
    assert r.status_code == 404 and "models root" in r.json()["error"]["message"]


def test_a_link_planted_after_submission_is_refused_by_the_worker_before_reading(env):
    client, settings, outside = env
    job_id = _post(client, options={"max_steps": 1}).json()["id"]
    corpus = settings.data_root / "mini" / "corpus.jsonl"
    corpus.unlink()
    corpus.symlink_to(outside / "secret.tsv")
    _OPENED.clear()
    execute(job_id, JobQueue(settings.queue_url).records)  # the worker's task body, in this process
    job = client.get(f"/jobs/{job_id}", headers=KEY).json()
    assert job["state"] == "failed"
    assert "mini/corpus.jsonl resolves outside the data root" in job["error"]
    assert _opened_under(outside) == []


def test_reindex_applies_the_gate_unless_forced():
    assert ReindexOptions().force is False
    assert ReindexOptions(force=True).force is True


def test_strangers_see_state_and_progress_only_and_no_absolute_path(env, tmp_path):
    client, settings, _ = env
    job_id = _post(client).json()["id"]
    records = JobQueue(settings.queue_url).records
    bad = str(settings.data_root.resolve() / "mini" / "qrels" / "test.tsv")
    update(
        records,
        job_id,
        state="failed",
        error=f"{bad}: line 1: bad",
        log_tail=[f"12:00:00 INFO x: reading {bad}"],
        worker="host:123",
        finished_at=time.time(),
    )
    public = client.get(f"/jobs/{job_id}")
    assert public.status_code == 200
    assert set(public.json()) <= PUBLIC_FIELDS
    listing = client.get("/jobs").json()
    assert listing["workers"] == [] and set(listing["jobs"][0]) == set(public.json())
    for r in (public, client.get("/jobs")):
        assert str(tmp_path) not in r.text and "host:123" not in r.text
    keyed = client.get(f"/jobs/{job_id}", headers=KEY)
    assert keyed.json()["data_dir"] == "mini"
    assert keyed.json()["error"] == "mini/qrels/test.tsv: line 1: bad"
    assert keyed.json()["log_tail"] == ["12:00:00 INFO x: reading mini/qrels/test.tsv"]
    assert str(tmp_path) not in keyed.text
    assert client.get(f"/jobs/{job_id}", headers={"X-API-Key": "wrong"}).status_code == 403


# -- issue 27: confined at open time (items 1, 3, 4) ---------------------------------------------------
CONFINED: list[tuple[str, str]] = []  # (root name, path relative to it) of every confined open
PLAIN: list[str] = []  # every other open by path (absolute), whatever it was


def _audit_reader(event: str, args: tuple) -> None:
    if event == "infonce_search.confined_open":
        CONFINED.append((str(args[0]), str(args[1])))
    elif event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
        path = os.fsdecode(args[0])
        if os.path.isabs(path):
            PLAIN.append(os.path.realpath(path))


sys.addaudithook(_audit_reader)


def _run(settings, job_id: str) -> dict:
    CONFINED.clear()
    PLAIN.clear()
    _OPENED.clear()
    execute(job_id, JobQueue(settings.queue_url).records)
    return JobQueue(settings.queue_url).get(job_id).model_dump()


def test_a_reindex_refuses_a_train_split_linked_after_submission(env, staged):
    """Item 1: reindex reads qrels/train.tsv to tune fusion; a link planted there after submission is
    refused when the file is opened, and nothing of the outside file reaches the job record."""
    from tests.app.conftest import publish

    client, settings, outside = env
    publish(staged["A"], settings.bundles_dir)  # reindex needs a live model
    r = _post(client, "mini", {"force": True, "onnx": False, "index_kind": "flat"}, job_type="reindex")
    assert r.status_code == 202, r.text
    train = settings.data_root / "mini" / "qrels" / "train.tsv"
    train.unlink()
    train.symlink_to(outside / "secret.tsv")
    job = _run(settings, r.json()["id"])
    assert job["state"] == "failed", job
    assert "mini/qrels/train.tsv resolves outside the data root" in job["error"]
    assert "SECRET" not in str(job)
    assert _opened_under(outside) == []


def test_a_hard_linked_corpus_is_refused_at_submission_and_at_open(env, staged, tmp_path):
    """Item 3: a hard link cannot be seen by resolving a path; the link count of the opened file can."""
    from tests.app.conftest import publish

    client, settings, outside = env
    publish(staged["A"], settings.bundles_dir)
    planted = outside / "corpus.jsonl"
    planted.write_text('{"_id": "d1", "title": "SECRET TITLE", "text": "SECRET TEXT"}\n')
    r = _post(client, "mini", {"force": True, "onnx": False, "index_kind": "flat"}, job_type="reindex")
    assert r.status_code == 202, r.text
    corpus = settings.data_root / "mini" / "corpus.jsonl"
    corpus.unlink()
    os.link(planted, corpus)
    job = _run(settings, r.json()["id"])
    assert job["state"] == "failed", job
    assert "mini/corpus.jsonl has 2 hard links" in job["error"]
    assert job["bundle_version"] is None and "SECRET" not in str(job)
    again = _post(client, "mini", {"force": True}, job_type="reindex")
    assert again.status_code == 400 and again.json()["error"]["code"] == "dataset_refused"
    assert "hard links" in again.json()["error"]["message"] and str(tmp_path) not in again.text


def test_a_model_folder_whose_files_link_outside_is_refused(env):
    """Item 4: the base model is checked file by file at submission, and read file by file through the
    confined reader by the worker (a link planted after submission fails the job, unread)."""
    client, settings, outside = env
    models = settings.models_root
    (outside / "model" / "config.json").write_text('{"SECRET": 1}')
    linky = models / "linky"
    linky.mkdir()
    (linky / "config.json").symlink_to(outside / "model" / "config.json")
    r = _post(client, options={"base_model": "linky"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "model_refused", r.text
    assert "linky/config.json resolves outside the models root" in r.json()["error"]["message"]
    hard = models / "hard"
    hard.mkdir()
    os.link(outside / "model" / "config.json", hard / "config.json")
    r = _post(client, options={"base_model": "hard"})
    assert r.status_code == 400 and "hard links" in r.json()["error"]["message"]
    (models / "mine" / "config.json").write_text("{}")
    job_id = _post(client, options={"base_model": "mine", "max_steps": 1}).json()["id"]
    (models / "mine" / "config.json").unlink()
    (models / "mine" / "config.json").symlink_to(outside / "model" / "config.json")
    job = _run(settings, job_id)
    assert job["state"] == "failed", job
    assert "mine/config.json resolves outside the models root" in job["error"]
    assert _opened_under(outside) == []


@pytest.mark.slow
def test_every_file_each_job_type_opens_under_a_root_goes_through_the_confined_reader(tmp_path, demo_dataset):
    """An audit hook sees every `open` by path and every confined open: a retrain (from a base model
    under the models root) and a reindex each open their dataset files and model files only through the
    reader, and no file under either root by any other way."""
    from contract.encoding.encoder import Encoder
    from training.data.beir_slice import beir_slice

    data = tmp_path / "data"
    beir_slice(demo_dataset, data / "slice", n_train=16, n_test=8, n_distractors=20)
    models = tmp_path / "models"
    base = Encoder.load()
    base.model.max_seq_length = 32
    base.save(models / "small")
    queue = JobQueue(f"sqlite:///{tmp_path / 'jobs.db'}")
    common = {"data_root": data, "bundles_dir": tmp_path / "bundles", "models_root": models}
    quick = {"max_steps": 1, "max_seq_length": 32, "batch_size": 8, "report": False, "eval_max_queries": 8}
    quick |= {"onnx": False, "index_kind": "flat", "force": True, "base_model": "small"}
    model_files = {
        os.path.relpath(os.path.join(d, f), models) for d, _, fs in os.walk(models / "small") for f in fs
    }
    dataset = {f"slice/{f}" for f in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv")}
    roots = [os.path.realpath(data), os.path.realpath(models)]
    for job_type, options, expected in (
        ("retrain", quick, {("data root", f) for f in dataset} | {("models root", f) for f in model_files}),
        (
            "reindex",
            {"onnx": False, "index_kind": "flat", "force": True},
            {("data root", f) for f in dataset},
        ),
    ):
        record = queue.submit(job_type, "slice", options, **common)
        CONFINED.clear()
        PLAIN.clear()
        execute(record.id, queue.records)
        job = queue.get(record.id)
        assert job.state == "succeeded", (job.error, job.log_tail)
        assert set(CONFINED) == expected, job_type
        # the reader opens each root itself (a directory descriptor to walk from); nothing below it by path
        bypass = [p for p in PLAIN if any(p.startswith(r + os.sep) for r in roots)]
        assert bypass == [], f"{job_type} opened files under a root without the reader: {bypass}"
    queue.close()


def test_the_log_tail_carries_no_absolute_path_outside_the_roots_either(env):
    """Item 5: a job's work folder, a package's file: whatever absolute path a log line names is cut to
    its last component for key holders too."""
    client, settings, _ = env
    job_id = _post(client).json()["id"]
    records = JobQueue(settings.queue_url).records
    lines = [
        "12:00:00 INFO pipeline: training into /var/tmp/job-1234abcd-x/run-20260101T000000Z",
        "12:00:01 WARNING x: see /usr/lib/python3/site-packages/pkg/mod.py:12 (http://example.org/a/b)",
    ]
    update(records, job_id, state="failed", error="bad file /srv/elsewhere/data.bin", log_tail=lines)
    keyed = client.get(f"/jobs/{job_id}", headers=KEY).json()
    assert keyed["log_tail"][0].endswith("training into …/run-20260101T000000Z")
    assert "…/mod.py:12" in keyed["log_tail"][1] and "http://example.org/a/b" in keyed["log_tail"][1]
    assert keyed["error"] == "bad file …/data.bin"
    for text in (*keyed["log_tail"], keyed["error"]):
        assert "/var/" not in text and "/usr/" not in text and "/srv/" not in text
