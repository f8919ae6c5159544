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
