"""SEARCH_RETRAIN_ON_DRIFT: GET /generalization-gap queues one retrain with `feedback: include` when the live
verdict is worse than predicted, and none when the setting is off, the verdict is consistent, or a retrain of
the collection is already queued. The real app and a real SQLite queue; no worker, so the job stays queued
(what it would train is tests/test_feedback_retrain.py's subject).

The judgments make the drift real: for each of the fixture's test queries the document the live model ranks
last is judged relevant, so the live P1 risk lies far above the report's predicted interval."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.live.drift_retrain import maybe_retrain
from app.main import create_app
from contract.jobs.queue import JobQueue
from tests.app.conftest import make_settings, publish
from training.data.beir_slice import beir_slice

KEY = {"X-API-Key": "test-key"}


def _judge_the_last_hit(client: TestClient, slice_data) -> None:
    judgments = []
    for qid in sorted(slice_data.qrels):
        r = client.post("/search", json={"query": slice_data.queries[qid], "top_k": len(slice_data.corpus)})
        assert r.status_code == 200, r.text
        shown = r.json()["results"][0]
        judgments.append(
            {
                "query": slice_data.queries[qid],
                "document_id": shown["hits"][-1]["id"],
                "relevant": True,
                "search_id": shown["search_id"],
            }
        )
    assert client.post("/feedback", json={"judgments": judgments}, headers=KEY).status_code == 200


def _retrains(queue_url: str) -> list:
    queue = JobQueue(queue_url)
    try:
        return [r for r in queue.recent() if r.type == "retrain"]
    finally:
        queue.close()


def test_a_worse_verdict_queues_one_retrain_only_when_the_setting_is_on(
    tmp_path, staged, slice_data, demo_dataset
):
    bundles, data_root = tmp_path / "bundles", tmp_path / "data"
    beir_slice(demo_dataset, data_root / "mini", n_train=8, n_test=4, n_distractors=10)
    publish(staged["A"], bundles)
    common = {"data_root": data_root, "queue_url": f"sqlite:///{tmp_path / 'jobs.db'}"}
    with TestClient(create_app(make_settings(bundles, **common))) as client:
        # the collection's dataset, as a person's job names it (cancelled: no worker here anyway)
        r = client.post("/jobs", json={"type": "reindex", "dataset": "mini"}, headers=KEY)
        assert r.status_code == 202, r.text
        assert client.post(f"/jobs/{r.json()['id']}/cancel", headers=KEY).status_code == 200
        _judge_the_last_hit(client, slice_data)
        live = client.get("/generalization-gap").json()["live"]
        assert live["verdict"] == "worse than predicted", live
    assert _retrains(common["queue_url"]) == []  # off by default: reported, nothing queued

    with TestClient(create_app(make_settings(bundles, retrain_on_drift=True, **common))) as client:
        assert client.get("/generalization-gap").json()["live"]["verdict"] == "worse than predicted"
        client.get("/generalization-gap")  # the same evidence again: still one job
        jobs = _retrains(common["queue_url"])
        assert len(jobs) == 1, jobs
        job = client.get(f"/jobs/{jobs[0].id}", headers=KEY).json()
    assert job["state"] == "queued" and job["options"] == {"feedback": "include"}, job
    assert job["dataset"] == "mini" and job["reason"].startswith("drift of "), job
    assert "above the predicted" in job["reason"]


def test_no_retrain_when_consistent_or_when_one_is_queued(tmp_path, demo_dataset):
    bundles, data_root = tmp_path / "bundles", tmp_path / "data"
    beir_slice(demo_dataset, data_root / "mini", n_train=8, n_test=4, n_distractors=10)
    settings = make_settings(bundles, data_root=data_root, queue_url=f"sqlite:///{tmp_path / 'jobs.db'}",
                             retrain_on_drift=True)  # fmt: skip
    queue = JobQueue(settings.queue_url)
    try:
        worse = {"verdict": "worse than predicted", "n_judgments": 40, "n_queries": 20}
        where = {"version": "v1", "collection": "default", "data_name": "mini"}
        assert maybe_retrain({**worse, "verdict": "consistent"}, settings, queue, **where) is None
        assert queue.recent() == []
        queued = queue.submit("retrain", "mini", {}, data_root=data_root, bundles_dir=bundles)
        assert maybe_retrain(worse, settings, queue, **where) is None  # a person's retrain is queued
        queue.cancel(queued.id)
        made = maybe_retrain(worse, settings, queue, **where)
        assert made is not None and made.options == {"feedback": "include"}
        assert maybe_retrain(worse | {"n_judgments": 41}, settings, queue, **where) is None  # it is queued
        assert [r.id for r in queue.recent() if r.state == "queued"] == [made.id]
    finally:
        queue.close()
    assert Path(bundles / ".drift-retrain.lock").is_file()
