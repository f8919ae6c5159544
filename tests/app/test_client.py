"""infonce_search.Client and AsyncClient against the real app served by uvicorn on loopback (real HTTP),
with the session's live scifact bundle and a real SQLite job queue (no worker: jobs stay queued)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import uvicorn

from app.main import create_app
from infonce_search import AsyncClient, Client, errors
from tests.app.conftest import make_settings
from tests.servers import free_port
from tests.test_layering import imports_of

pytestmark = pytest.mark.scifact
KEY = "test-key"


@pytest.fixture(scope="module")
def server(live_bundles, tmp_path_factory):
    bundles, version = live_bundles
    root = tmp_path_factory.mktemp("client")
    (root / "data" / "mini").mkdir(parents=True)
    (root / "data" / "mini" / "corpus.jsonl").write_text('{"_id": "d1", "title": "t", "text": "x"}\n')
    settings = make_settings(
        bundles, reload_poll_seconds=0, data_root=root / "data", queue_url=f"sqlite:///{root / 'jobs.db'}"
    )
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", version
    srv.should_exit = True
    thread.join(timeout=30)


def test_the_client_package_imports_neither_app_nor_training():
    package = Path(__file__).resolve().parents[2] / "infonce_search"
    for file in package.rglob("*.py"):
        bad = {m for m in imports_of(file) if m.split(".")[0] in ("app", "training")}
        assert bad == set(), (file.name, bad)


def test_sync_client_search_embed_bundles_and_errors(server, shared_encoder, slice_data):
    url, version = server
    query = next(iter(slice_data.queries.values()))
    with Client(url, api_key=KEY) as client:
        found = client.search(query, top_k=3, include=["title"])
        assert found["version"] == version and len(found["results"][0]["hits"]) == 3
        assert "title" in found["results"][0]["hits"][0]
        vectors = client.embed([query])
        np.testing.assert_allclose(
            vectors["embeddings"], shared_encoder.encode([query], kind="query"), atol=1e-5
        )
        by_vector = client.search(vector=np.asarray(vectors["embeddings"][0]), top_k=3)
        assert [h["id"] for h in by_vector["results"][0]["hits"]] == [
            h["id"] for h in found["results"][0]["hits"]
        ]
        two = client.search(vector=vectors["embeddings"] * 2, top_k=1)  # several vectors
        assert len(two["results"]) == 2
        assert client.bundles()["live"] == version
        assert client.activate(version)["version"] == version

        with pytest.raises(errors.InvalidRequest) as bad:
            client.search(query, top_k=0)
        assert (
            bad.value.status_code == 422
            and bad.value.code == "invalid_request"
            and "top_k" in bad.value.message
        )
        with pytest.raises(errors.NotFound) as missing:
            client.activate("20990101T000000.000000Z-abcdef")
        assert missing.value.code == "bundle_not_found"
    with Client(url, api_key="wrong") as wrong, pytest.raises(errors.Forbidden) as denied:
        wrong.activate(version)
    assert denied.value.code == "forbidden"


def test_sync_client_jobs_and_wait_for_job(server):
    url, _ = server
    with Client(url, api_key=KEY) as client:
        job = client.submit_job("reindex", "mini")
        assert job["state"] == "queued" and job["type"] == "reindex"
        assert job["id"] in [j["id"] for j in client.jobs()["jobs"]]
        with pytest.raises(errors.JobTimeout) as waiting:  # no worker runs: it stays queued
            client.wait_for_job(job["id"], timeout=0.3, poll_interval=0.1)
        assert waiting.value.job["state"] == "queued"
        assert client.cancel_job(job["id"])["state"] == "cancelled"
        with pytest.raises(errors.JobFailed) as ended:
            client.wait_for_job(job["id"], timeout=5, poll_interval=0.1)
        assert ended.value.job["state"] == "cancelled"
        with pytest.raises(errors.NotFound) as unknown:
            client.job("no-such-job")
        assert unknown.value.code == "job_not_found"
        with pytest.raises(errors.NotFound) as no_data:
            client.submit_job("reindex", "no-such-dataset")
        assert no_data.value.code == "dataset_not_found"


def test_async_client(server, slice_data):
    url, version = server
    queries = list(slice_data.queries.values())[:4]

    async def scenario():
        async with AsyncClient(url, api_key=KEY) as client:
            answers = await asyncio.gather(*(client.search(q, top_k=2) for q in queries))
            vectors = await client.embed(queries[:2], kind="document")
            job = await client.submit_job("reindex", "mini")
            await client.cancel_job(job["id"])
            with pytest.raises(errors.JobFailed):
                await client.wait_for_job(job["id"], timeout=5, poll_interval=0.1)
            with pytest.raises(errors.InvalidRequest) as bad:
                await client.embed([])
            return answers, vectors, bad.value

    answers, vectors, bad = asyncio.run(scenario())
    assert [a["version"] for a in answers] == [version] * 4
    assert vectors["kind"] == "document" and len(vectors["embeddings"]) == 2
    assert bad.code == "invalid_request" and "body.input" in bad.message


def test_no_live_bundle_is_its_own_exception(tmp_path):
    from fastapi.testclient import TestClient

    with (
        TestClient(create_app(make_settings(tmp_path / "none"))) as http,
        Client(http=http) as client,
        pytest.raises(errors.NoLiveBundle) as nothing,
    ):
        client.search("anything")
    assert nothing.value.status_code == 503 and nothing.value.code == "no_live_bundle"
