"""The job routes on the real app (TestClient with lifespan) and a real SQLite queue, no worker.

What a worker does with the jobs is proven in tests/test_jobs_e2e.py; here: the HTTP contract (202, auth,
400 for paths escaping the data root, 404, 422 naming the field, 409) and that records outlive the app.
"""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from contract.jobs.queue import JobQueue
from contract.jobs.records import update

KEY = {"X-API-Key": "k3y"}


@pytest.fixture()
def settings(tmp_path):
    data = tmp_path / "data"
    (data / "mini" / "qrels").mkdir(parents=True)
    (data / "mini" / "corpus.jsonl").write_text('{"_id": "d1", "title": "t", "text": "x"}\n')
    (tmp_path / "outside").mkdir()
    (data / "link").symlink_to(tmp_path / "outside")
    return Settings(
        bundles_dir=tmp_path / "bundles",
        api_key="k3y",
        data_root=data,
        queue_url=f"sqlite:///{tmp_path / 'jobs.db'}",
        job_heartbeat_timeout_s=5,
        reload_poll_seconds=0,
    )


@pytest.fixture()
def client(settings):
    with TestClient(create_app(settings)) as c:
        yield c


def _submit(client: TestClient, **body) -> object:
    return client.post(
        "/jobs", json={"type": "retrain", "dataset": "mini", "options": {}} | body, headers=KEY
    )


def test_submit_returns_202_and_the_job_is_listed(client, settings):
    r = _submit(client, options={"max_steps": 2, "max_seq_length": 64})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["state"] == "queued" and job["type"] == "retrain" and job["dataset"] == "mini"
    assert job["options"] == {"max_steps": 2, "max_seq_length": 64}
    assert client.get(f"/jobs/{job['id']}", headers=KEY).json() == job
    listing = client.get("/jobs", headers=KEY).json()
    assert [j["id"] for j in listing["jobs"]] == [job["id"]]
    assert listing["workers"] == []  # none started in this test
    # the queue holds it for a worker
    assert JobQueue(settings.queue_url).huey.pending_count() == 1


def test_records_survive_an_api_restart(settings):
    with TestClient(create_app(settings)) as c:
        job_id = _submit(c).json()["id"]
    with TestClient(create_app(settings)) as c:
        assert c.get(f"/jobs/{job_id}").json()["state"] == "queued"


def test_mutating_routes_need_the_api_key(client):
    body = {"type": "retrain", "dataset": "mini"}
    assert client.post("/jobs", json=body).status_code == 401
    assert client.post("/jobs", json=body, headers={"X-API-Key": "nope"}).status_code == 403
    job_id = _submit(client).json()["id"]
    assert client.post(f"/jobs/{job_id}/cancel").status_code == 401
    assert client.get(f"/jobs/{job_id}").status_code == 200  # reading needs no key


@pytest.mark.parametrize("dataset", ["../outside", "mini/../../outside", "link", "/etc", "..", "."])
def test_dataset_outside_the_data_root_is_400(client, dataset):
    r = _submit(client, dataset=dataset)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "dataset_refused"
    assert "data root" in r.json()["error"]["message"]
    assert client.get("/jobs").json()["jobs"] == []


def test_unknown_dataset_is_404(client):
    r = _submit(client, dataset="nope")
    assert r.status_code == 404
    assert "'nope'" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"options": {"max_steps": 0}}, "options.max_steps"),
        ({"options": {"learning_rate": 1e-3}}, "options.learning_rate"),
        ({"type": "reindex", "options": {"index_kind": "annoy"}}, "options.index_kind"),
        ({"options": {"tower": "documents"}}, "options.tower"),  # auto, full or query
        ({"type": "reindex", "options": {"tower": "query"}}, "options.tower"),  # a reindex trains nothing
        ({"type": "deploy"}, "body.type"),
        ({"dataset": ""}, "body.dataset"),
    ],
)
def test_bad_body_or_options_are_422_naming_the_field(client, body, field):
    r = _submit(client, **body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith(field)


def test_cancel_queued_then_finished_and_unknown(client, settings):
    job_id = _submit(client).json()["id"]
    r = client.post(f"/jobs/{job_id}/cancel", headers=KEY)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert client.get(f"/jobs/{job_id}").json()["state"] == "cancelled"

    done = _submit(client).json()["id"]
    update(JobQueue(settings.queue_url).records, done, state="succeeded")
    assert client.post(f"/jobs/{done}/cancel", headers=KEY).status_code == 409
    assert client.get("/jobs/no-such-job").status_code == 404
    assert client.post("/jobs/no-such-job/cancel", headers=KEY).status_code == 404


def test_running_job_with_an_expired_heartbeat_reads_as_failed(client, settings):
    job_id = _submit(client).json()["id"]
    records = JobQueue(settings.queue_url).records
    update(records, job_id, state="running", worker="gone:1", heartbeat_at=time.time())
    assert client.get(f"/jobs/{job_id}").json()["state"] == "running"
    update(records, job_id, heartbeat_at=time.time() - 6)  # older than job_heartbeat_timeout_s=5
    job = client.get(f"/jobs/{job_id}", headers=KEY).json()
    assert job["state"] == "failed" and "heartbeat expired" in job["error"]


def test_the_lifespan_opens_the_job_queue_and_closes_it(settings, tmp_path, monkeypatch):
    closed: list[JobQueue] = []
    real_close = JobQueue.close

    def counting_close(self: JobQueue) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(JobQueue, "close", counting_close)
    with TestClient(create_app(settings)) as client:
        queue = client.app.state.job_queue
        assert (tmp_path / "jobs.db").is_file()  # opened at startup, before any request
        assert client.get("/jobs").status_code == 200
        assert closed == []
    assert closed == [queue]  # closed once, when the lifespan ends
    assert Settings(bundles_dir=tmp_path / "b").queue_url == f"sqlite:///{(tmp_path / 'jobs.db').as_posix()}"


def test_the_old_tower_option_is_still_accepted_and_the_spec_marks_it_deprecated(client):
    """`tower` was renamed `retrain_scope`: a job sending the old key is queued with it as sent (the worker
    maps it), and the spec documents both, the old one deprecated."""
    r = _submit(client, options={"tower": "query"})
    assert r.status_code == 202, r.text
    assert r.json()["options"] == {"tower": "query"}
    assert _submit(client, options={"retrain_scope": "auto"}).status_code == 202
    options = client.get("/openapi.json").json()["components"]["schemas"]["RetrainOptions"]["properties"]
    assert options["tower"].get("deprecated") is True
    assert "retrain_scope" in options and not options["retrain_scope"].get("deprecated")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("lr", float("inf")),
        ("lr", float("nan")),
        ("query_lr", float("inf")),
        ("max_steps", 2**70),
        ("epochs", 10**9),
        ("query_epochs", 10**9),
        ("batch_size", 10**9),
        ("query_report_pool", 10**12),
        ("query_lora_alpha", 10**12),
        ("seed", -1),
        ("freeze_layers", -1),
        (
            "freeze_layers",
            49,
        ),  # past contract/limits.py MAX_FREEZE_LAYERS; the model's depth is the trainer's
        ("cpu_bf16", "yes"),
        ("time_budget_s", 10**9),  # past a week (contract/limits.py MAX_TIME_BUDGET_S)
        ("time_budget_s", 0),
        ("time_budget_s", "10m"),  # seconds over HTTP; durations are the command line's
    ],
)
def test_a_job_option_past_its_bound_is_422_naming_it(client, option, value):
    """Issue 43 item 5: these were accepted (202) and left to run away; the bound is in contract/limits.py."""
    body = {"type": "retrain", "dataset": "mini", "options": {option: value}}
    r = client.post("/jobs", content=json.dumps(body), headers=KEY | {"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith(f"options.{option}")


def test_a_time_budget_is_accepted_and_kept_with_the_job(client):
    r = _submit(client, options={"time_budget_s": 600})
    assert r.status_code == 202, r.text
    assert r.json()["options"] == {"time_budget_s": 600}
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    budget = spec["RetrainOptions"]["properties"]["time_budget_s"]
    assert any(b.get("maximum") == 7 * 24 * 3600 for b in [budget, *budget.get("anyOf", [])])
    assert "budget_s" in spec["Progress"]["properties"]  # a job shows its budget beside its eta_s


def test_every_numeric_job_option_states_its_bound_in_the_spec(client):
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    for model in ("RetrainOptions", "ReindexOptions"):
        for name, prop in spec[model]["properties"].items():
            branches = [prop, *prop.get("anyOf", [])]
            if not any(b.get("type") in ("integer", "number") for b in branches):
                continue
            assert any("maximum" in b or "exclusiveMaximum" in b for b in branches), f"{model}.{name}"


def test_the_datasets_a_job_may_name_are_listed_behind_the_key(client, settings):
    """Issue 44 item 3: the page's dataset field offers a list. What is listed is what POST /jobs takes: a
    BEIR folder and a pairs file under the data root; a link out of it, a hidden entry and a folder that is
    no dataset are left out."""
    (settings.data_root / "pairs.jsonl").write_text('{"query": "q", "positive": "p"}\n')
    (settings.data_root / ".hidden").mkdir()
    (settings.data_root / "empty-folder").mkdir()
    (settings.data_root / "outside-corpus").symlink_to(settings.data_root.parent / "outside")
    assert client.get("/datasets").status_code == 401
    r = client.get("/datasets", headers=KEY)
    assert r.status_code == 200, r.text
    assert r.json() == {"datasets": ["mini", "pairs.jsonl"]}
    for name in r.json()["datasets"]:  # each one is accepted by a submission
        assert _submit(client, dataset=name).status_code == 202


def test_the_example_options_of_the_page_are_valid_for_their_job_type(client):
    """The Jobs tab's example options were `{"epochs": 1}` whatever the type, and a reindex (the default
    type) refuses it with 422. The page shows each type's own example, read from its <option>."""
    import re
    from pathlib import Path

    html = (Path(__file__).resolve().parents[3] / "app" / "static" / "index.html").read_text()
    examples = dict(re.findall(r'<option value="(\w+)" data-example=\'([^\']+)\'', html))
    assert set(examples) == {"reindex", "retrain"}, examples
    for job_type, example in examples.items():
        r = _submit(client, type=job_type, options=json.loads(example))
        assert r.status_code == 202, (job_type, example, r.text)
    assert _submit(client, type="reindex", options={"epochs": 1}).status_code == 422  # the old example
