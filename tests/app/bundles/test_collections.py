"""Collections with the real app: names, aliases, isolation, lazy loading and eviction, scoped jobs.

Bundles are the session's demo-dataset slice (tests/app/conftest.py): bundle A and B share the base encoder;
bundle T is the same corpus encoded by a *different* encoder — the base model after a few AdamW steps of
InfoNCE on deliberately mismatched pairs, so its rankings differ — to prove that two collections with
different encoders answer the same query each with their own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from contract.bundles.collections import Collections
from contract.encoding.encoder import document_text
from tests.app.conftest import make_settings, publish
from training.bundle.store import BundleStore

KEY = {"X-API-Key": "test-key"}
QUERY = "vitamin d and bone density"


@pytest.fixture(scope="module")
def other_encoder(_base_encoder, slice_data):
    """The base model (48 tokens) after 4 AdamW steps of InfoNCE on unrelated (query, document) pairs."""
    import copy

    import torch

    from training.losses.info_nce import info_nce_loss

    encoder = copy.deepcopy(_base_encoder)
    model = encoder.model
    model.max_seq_length = 48  # kept by its bundle: every encode with this encoder stays cheap
    queries = list(slice_data.queries.values())
    docs = [d.text for d in slice_data.corpus.values()]
    rng = np.random.default_rng(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    for _ in range(4):
        q = list(rng.choice(queries, 8, replace=False))
        d = list(rng.choice(docs, 8, replace=False))  # unrelated "positives": the rankings must move
        feats_q = model.tokenize(q)
        feats_d = model.tokenize(d)
        emb_q = torch.nn.functional.normalize(model(feats_q)["sentence_embedding"], dim=-1)  # (8, 384)
        emb_d = torch.nn.functional.normalize(model(feats_d)["sentence_embedding"], dim=-1)  # (8, 384)
        loss = info_nce_loss(emb_q, emb_d, temperature=0.05)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return encoder


@pytest.fixture(scope="module")
def staged_other_encoder(tmp_path_factory, other_encoder, slice_data) -> Path:
    """Bundle T: the slice encoded by the other encoder."""
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, BundleRecord, build_bundle
    from training.eval.evaluate import encode_corpus

    encoder = other_encoder
    _, emb = encode_corpus(encoder, slice_data.corpus, show_progress=False)
    root = tmp_path_factory.mktemp("staged-other-encoder")
    return build_bundle(
        encoder,
        slice_data.corpus,
        staging_dir=root / "T",
        doc_embeddings=emb,
        record=BundleRecord(metrics={"test": {"ndcg@10": 0.5}}),
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )


def _root(tmp_path: Path) -> tuple[Path, Path]:
    bundles = tmp_path / "bundles"
    return bundles, bundles / "collections"


def _app(tmp_path: Path, **overrides):
    bundles, _ = _root(tmp_path)
    settings = make_settings(bundles, queue_url=f"sqlite:///{tmp_path / 'jobs.db'}", **overrides)
    return create_app(settings)


def _new_collection(tmp_path: Path, name: str, staged_dir: Path) -> str:
    bundles, root = _root(tmp_path)
    folder = Collections(root, bundles).create(name)
    return publish(staged_dir, folder)


def _search(client: TestClient, prefix: str, query: str = QUERY, **extra) -> dict:
    r = client.post(f"{prefix}/search", json={"query": query, "top_k": 5, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_names_with_dots_slashes_unicode_and_alias_loops_are_refused(tmp_path, staged):
    bundles, _ = _root(tmp_path)
    publish(staged["A"], bundles)
    _new_collection(tmp_path, "docs", staged["A"])
    with TestClient(_app(tmp_path)) as client:
        for bad in ["..", ".", "a/b", "Docs", "é", "docs\n", "", "-x", "a" * 64, "a b", "a.b"]:
            r = client.post("/collections", json={"name": bad}, headers=KEY)
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["error"]["code"] == "collection_refused"
        for raw in ["%2E%2E", "%C3%A9", "A", "a%20b", "%2E"]:
            r = client.post(f"/collections/{raw}/search", json={"query": "x"})
            assert r.status_code == 400, (raw, r.text)
        # a separator is never part of a name: no route matches
        assert client.post("/collections/a%2Fb/search", json={"query": "x"}).status_code == 404
        assert client.post("/collections/nope/search", json={"query": "x"}).status_code == 404
        # aliases: a name of its own, naming a collection, never an alias
        assert client.put("/aliases/prod", json={"collection": "docs"}, headers=KEY).status_code == 200
        loop = client.put("/aliases/stage", json={"collection": "prod"}, headers=KEY)
        assert loop.status_code == 409 and "alias" in loop.json()["error"]["message"]
        assert client.put("/aliases/prod", json={"collection": "prod"}, headers=KEY).status_code == 409
        assert client.put("/aliases/docs", json={"collection": "default"}, headers=KEY).status_code == 409
        assert client.put("/aliases/default", json={"collection": "docs"}, headers=KEY).status_code == 409
        assert client.put("/aliases/x", json={"collection": "missing"}, headers=KEY).status_code == 404
        assert client.put("/aliases/%2E%2E", json={"collection": "docs"}, headers=KEY).status_code == 400
        # a collection cannot take an alias's name; creating and deleting need the key
        assert client.post("/collections", json={"name": "prod"}, headers=KEY).status_code == 409
        assert client.post("/collections", json={"name": "new"}).status_code == 401
        assert client.delete("/collections/docs").status_code == 401
        assert client.put("/aliases/y", json={"collection": "docs"}).status_code == 401
        assert client.delete("/collections/default", headers=KEY).status_code == 409
    # a folder linked in from elsewhere is not a collection of this root
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, _root(tmp_path)[1] / "linked")
    with TestClient(_app(tmp_path)) as client:
        assert "linked" not in [c["name"] for c in client.get("/collections").json()["collections"]]
        assert client.post("/collections/linked/search", json={"query": "x"}).status_code == 400


def test_two_collections_with_different_encoders_answer_the_same_query_differently(
    tmp_path, staged, staged_other_encoder, shared_encoder, other_encoder, slice_data
):
    bundles, _ = _root(tmp_path)
    publish(staged["A"], bundles)
    _new_collection(tmp_path, "tuned", staged_other_encoder)
    with TestClient(_app(tmp_path)) as client:
        base = _search(client, "")
        tuned = _search(client, "/collections/tuned")
        again = _search(client, "/collections/default")
        # the hits, not the search ids: a search id is signed with the time of its search
        assert [r["hits"] for r in base["results"]] == [r["hits"] for r in again["results"]]
        assert base["version"] != tuned["version"]
        base_ids = [h["id"] for h in base["results"][0]["hits"]]
        tuned_ids = [h["id"] for h in tuned["results"][0]["hits"]]
        assert base_ids != tuned_ids
    # each answer is exact search under its own encoder (brute force over the same corpus)
    ids = list(slice_data.corpus)
    texts = [document_text(d.title, d.text) for d in slice_data.corpus.values()]
    for encoder, got in ((shared_encoder, base_ids), (other_encoder, tuned_ids)):
        docs = encoder.encode(texts, kind="document")  # (n_docs, 384)
        q = encoder.encode([QUERY], kind="query")[0]  # (384,)
        best = [ids[i] for i in np.argsort(-(docs @ q), kind="stable")[:5]]
        assert got[:3] == best[:3], (got, best)


def test_delete_alias_flip_and_hot_swap_of_one_collection_leave_the_others_alone(tmp_path, staged):
    bundles, _ = _root(tmp_path)
    default_version = publish(staged["A"], bundles)
    x = _new_collection(tmp_path, "x", staged["A"])
    y = _new_collection(tmp_path, "y", staged["A"])
    with TestClient(_app(tmp_path)) as client:
        assert client.put("/aliases/prod", json={"collection": "x"}, headers=KEY).json()["previous"] is None
        served = client.post("/collections/prod/search", json={"query": QUERY})
        assert served.headers["x-collection"] == "x" and served.json()["version"] == x
        flip = client.put("/aliases/prod", json={"collection": "y"}, headers=KEY)
        assert flip.status_code == 200 and flip.json() == {
            "alias": "prod",
            "collection": "y",
            "previous": "x",
        }
        served = client.post("/collections/prod/search", json={"query": QUERY})
        assert served.headers["x-collection"] == "y" and served.json()["version"] == y
        assert client.get("/aliases").json() == {"aliases": {"prod": "y"}}

        # hot swap of y: publish B and activate it there; x and default keep their versions
        b = publish(staged["B"], Collections(_root(tmp_path)[1], bundles).folder("y"))
        act = client.post(f"/collections/y/bundles/{b}/activate", headers=KEY)
        assert act.status_code == 200, act.text
        assert _search(client, "/collections/prod")["version"] == b
        assert _search(client, "/collections/x")["version"] == x
        assert _search(client, "")["version"] == default_version
        assert client.get("/collections/x/bundles").json()["live"] == x
        assert client.get("/bundles").json()["live"] == default_version

        # y is aliased: it cannot go; x can, and the others serve on
        assert client.delete("/collections/y", headers=KEY).status_code == 409
        gone = client.delete("/collections/x", headers=KEY)
        assert gone.status_code == 200 and gone.json() == {"deleted": "x", "versions": [x]}
        assert client.post("/collections/x/search", json={"query": QUERY}).status_code == 404
        assert not (_root(tmp_path)[1] / "x").exists()
        assert _search(client, "/collections/y")["version"] == b
        assert _search(client, "")["version"] == default_version
        assert client.delete("/aliases/prod", headers=KEY).json()["collection"] == "y"
        assert client.delete("/collections/y", headers=KEY).status_code == 200
        assert [c["name"] for c in client.get("/collections").json()["collections"]] == ["default"]


def test_collections_load_lazily_are_evicted_under_the_budget_and_reload(tmp_path, staged):
    bundles, _ = _root(tmp_path)
    publish(staged["A"], bundles)
    for name in ("c1", "c2"):
        _new_collection(tmp_path, name, staged["A"])
    app = _app(tmp_path, max_loaded_collections=1)
    with TestClient(app) as client:
        listing = client.get("/collections").json()
        assert {c["name"]: c["loaded"] for c in listing["collections"]} == {
            "default": True,
            "c1": False,
            "c2": False,
        }
        first = client.post("/collections/c1/search", json={"query": QUERY})
        assert first.status_code == 200 and float(first.headers["x-collection-load-ms"]) > 0
        warm = client.post("/collections/c1/search", json={"query": QUERY})
        assert "x-collection-load-ms" not in warm.headers
        registry = app.state.collections
        # the same model files: one loaded copy of the encoder for default and c1
        assert (
            registry.loaded["c1"].hot_swap.live.encoder.model is registry.default.hot_swap.live.encoder.model
        )
        assert client.post("/collections/c2/search", json={"query": QUERY}).status_code == 200
        loaded = {c["name"]: c["loaded"] for c in client.get("/collections").json()["collections"]}
        assert loaded == {"default": True, "c1": False, "c2": True}
        again = client.post("/collections/c1/search", json={"query": QUERY})
        assert again.status_code == 200 and "x-collection-load-ms" in again.headers
        assert [r["hits"] for r in again.json()["results"]] == [r["hits"] for r in first.json()["results"]]
        info = client.get("/collections/c1").json()
        assert info["loaded"] and info["load_seconds"] > 0 and info["resident_bytes"] > 0
        # readiness lists every collection and loads none of them
        ready = client.get("/readyz").json()["collections"]
        assert ready["default"]["status"] == "ready" and ready["c1"]["status"] == "ready"
        assert ready["c2"]["status"] == "unloaded"
        assert not registry.loaded.get("c2")
        metrics = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    evictions = {s.labels["reason"]: s.value for s in families["search_collection_evictions"].samples}
    assert evictions == {"budget": 2.0}
    info_labels = [
        s.labels.get("collection", "")
        for f in families.values()
        for s in f.samples
        if s.name == "search_bundle_info"
    ]
    assert sorted(info_labels) == ["", "c1"]  # only what is loaded carries series (default: no label)


def test_a_byte_budget_evicts_by_what_is_loaded(tmp_path, staged):
    bundles, _ = _root(tmp_path)
    publish(staged["A"], bundles)
    for name in ("c1", "c2"):
        _new_collection(tmp_path, name, staged["A"])
    index_bytes = (bundles / BundleStore(bundles).current_version() / "index.faiss").stat().st_size
    app = _app(tmp_path, max_loaded_bytes=0)
    with TestClient(app) as client:
        shared = app.state.collections.resident_bytes()  # default: its index + the one encoder
        app.state.collections.settings = app.state.collections.settings.model_copy(
            update={"max_loaded_bytes": shared + index_bytes + 10}
        )
        for name in ("c1", "c2"):
            assert client.post(f"/collections/{name}/search", json={"query": QUERY}).status_code == 200
        listing = client.get("/collections").json()
        loaded = {c["name"]: c["loaded"] for c in listing["collections"]}
        assert loaded == {"default": True, "c1": False, "c2": True}
        # a second index fits, a second encoder copy would not: shared encoders count once
        assert listing["resident_bytes"] == shared + index_bytes


def test_jobs_name_their_collection_and_deleting_waits_for_them(tmp_path, staged):
    bundles, root = _root(tmp_path)
    publish(staged["A"], bundles)
    _new_collection(tmp_path, "c1", staged["A"])
    _new_collection(tmp_path, "c2", staged["A"])
    data = tmp_path / "data" / "mini"
    data.mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    with TestClient(_app(tmp_path, data_root=tmp_path / "data")) as client:
        job = client.post("/collections/c1/jobs", json={"type": "reindex", "dataset": "mini"}, headers=KEY)
        assert job.status_code == 202, job.text
        record = job.json()
        assert record["collection"] == "c1"
        assert client.get(f"/collections/c1/jobs/{record['id']}").status_code == 200
        assert client.get(f"/collections/c2/jobs/{record['id']}").status_code == 404
        assert client.post(f"/collections/c2/jobs/{record['id']}/cancel", headers=KEY).status_code == 404
        assert [j["id"] for j in client.get("/collections/c1/jobs").json()["jobs"]] == [record["id"]]
        assert client.get("/collections/c2/jobs").json()["jobs"] == []
        assert [j["collection"] for j in client.get("/jobs").json()["jobs"]] == ["c1"]
        busy = client.delete("/collections/c1", headers=KEY)
        assert busy.status_code == 409 and record["id"] in busy.json()["error"]["message"]
        assert client.post(f"/collections/c1/jobs/{record['id']}/cancel", headers=KEY).status_code == 200
        assert client.delete("/collections/c1", headers=KEY).status_code == 200
        assert _search(client, "/collections/c2")["version"]
    from contract.jobs.queue import JobQueue

    stored = JobQueue(f"sqlite:///{tmp_path / 'jobs.db'}").get(record["id"])
    assert Path(stored.bundles_dir) == (root / "c1").resolve()


def test_create_from_a_dataset_queues_a_retrain_into_the_new_collection(tmp_path, staged):
    bundles, root = _root(tmp_path)
    publish(staged["A"], bundles)
    data = tmp_path / "data" / "mini"
    data.mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    with TestClient(_app(tmp_path, data_root=tmp_path / "data")) as client:
        made = client.post(
            "/collections", json={"name": "fresh", "dataset": "mini", "options": {"epochs": 1}}, headers=KEY
        )
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["name"] == "fresh" and body["current"] is None and body["dataset"] == "mini"
        job = client.get(f"/collections/fresh/jobs/{body['job_id']}", headers=KEY).json()
        assert job["collection"] == "fresh" and job["type"] == "retrain"
        # nothing published yet: its routes say so, as an empty bundles folder does
        assert client.post("/collections/fresh/search", json={"query": QUERY}).status_code == 503
        # a refused job leaves no collection behind
        bad = client.post("/collections", json={"name": "nope", "dataset": "missing"}, headers=KEY)
        assert bad.status_code == 404
        bad = client.post("/collections", json={"name": "nope", "dataset": "../x"}, headers=KEY)
        assert bad.status_code == 400
        assert not (root / "nope").exists()
        assert client.post("/collections", json={"name": "fresh"}, headers=KEY).status_code == 409


def test_metrics_carry_a_bounded_collection_label(tmp_path, staged):
    bundles, _ = _root(tmp_path)
    publish(staged["A"], bundles)
    for name in ("c1", "c2"):
        _new_collection(tmp_path, name, staged["A"])
    with TestClient(_app(tmp_path, metrics_max_collections=1)) as client:
        for prefix in ("", "/collections/c1", "/collections/c2"):
            _search(client, prefix)
        client.get("/healthz")
        text = client.get("/metrics").text
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    by_collection = {
        (s.labels["collection"], s.labels["route"]): s.value
        for s in samples
        if s.name == "search_collection_requests_total"
    }
    assert by_collection == {
        ("default", "/search"): 1,  # the routes of old serve `default`
        ("c1", "/collections/{collection}/search"): 1,
        ("_other", "/collections/{collection}/search"): 1,  # past metrics_max_collections names
    }
    # the HTTP series of before are unchanged: by route, no collection
    http = {s.labels["route"] for s in samples if s.name == "search_http_requests_total"}
    assert {"/search", "/collections/{collection}/search", "/healthz"} <= http
    # each loaded collection's own series, labelled; default's as they were before collections
    vectors = {s.labels.get("collection", ""): s.value for s in samples if s.name == "search_index_vectors"}
    assert set(vectors) == {"", "c1", "c2"} and len(set(vectors.values())) == 1


def test_readyz_of_a_collection_checks_it(tmp_path, staged):
    bundles, root = _root(tmp_path)
    publish(staged["A"], bundles)
    _new_collection(tmp_path, "c1", staged["A"])
    Collections(root, bundles).create("empty")
    with TestClient(_app(tmp_path)) as client:
        r = client.get("/collections/c1/readyz")
        assert r.status_code == 200 and r.json()["status"] == "ready"
        assert client.get("/collections/empty/readyz").status_code == 503
        statuses = {n: c["status"] for n, c in client.get("/readyz").json()["collections"].items()}
        assert statuses == {"default": "ready", "c1": "ready", "empty": "empty"}
    shutil.rmtree(root / "empty")


def test_the_client_collection_view_calls_the_collection_routes(tmp_path, staged):
    import asyncio
    import threading
    import time

    import uvicorn

    from infonce_search import AsyncClient, Client, errors
    from tests.servers import free_port

    bundles, _ = _root(tmp_path)
    default_version = publish(staged["A"], bundles)
    docs_version = _new_collection(tmp_path, "docs", staged["A"])
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(_app(tmp_path), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    try:
        with Client(base, api_key="test-key") as client:
            docs = client.collection("docs")
            assert docs.search(QUERY, top_k=3).version == docs_version
            assert client.search(QUERY, top_k=3).version == default_version
            assert docs.bundles().live == docs_version
            # OpenAI's view of a collection: its name is a name of the model it serves
            assert [m.id for m in docs.models().data] == ["infonce-search", docs_version, "docs"]
            assert docs.embeddings("a vitamin d trial", model="docs").model == docs_version
            written = docs.upsert_documents([{"id": "only-in-docs", "text": "a vitamin d trial"}])
            assert written.version == docs_version
            assert docs.get_document("only-in-docs").id == "only-in-docs"
            with pytest.raises(errors.NotFound):
                client.get_document("only-in-docs")  # the default collection has no such document
            with pytest.raises(errors.NotFound):
                client.collection("missing").search(QUERY)
            with pytest.raises(errors.BadRequest):
                client.collection("..").search(QUERY)
            docs.close()  # a view closes nothing: the client still works
            assert client.ready().status == "ready"

        async def run() -> str:
            async with AsyncClient(base) as client:
                return (await client.collection("docs").search(QUERY)).version

        assert asyncio.run(run()) == docs_version
    finally:
        srv.should_exit = True
        thread.join(timeout=30)


def test_an_idle_collection_is_unloaded_and_loads_again_on_its_next_request(tmp_path, staged):
    from tests.app.conftest import wait_until

    bundles, _ = _root(tmp_path)
    publish(staged["A"], bundles)
    _new_collection(tmp_path, "c1", staged["A"])
    app = _app(tmp_path, collection_idle_seconds=1.0)
    with TestClient(app) as client:
        assert client.post("/collections/c1/search", json={"query": QUERY}).status_code == 200
        wait_until(lambda: "c1" not in app.state.collections.loaded, 30, "the idle sweep to unload c1")
        assert "default" in app.state.collections.loaded  # never unloaded
        again = client.post("/collections/c1/search", json={"query": QUERY})
        assert again.status_code == 200 and "x-collection-load-ms" in again.headers


def test_bundles_with_the_same_files_share_one_loaded_encoder_and_query_tower(
    tmp_path, staged, staged_distilled
):
    """contract/encoding/shared_models.py: the torch module, the ONNX session and the static table are
    loaded once for every bundle whose files have the same checksums; another model is its own copy."""
    from app.engine.encoder_choice import load_encoder_backend
    from contract.bundles.bundle import load_bundle

    one, two = tmp_path / "one", tmp_path / "two"
    a1, a2 = load_bundle(one / publish(staged["A"], one)), load_bundle(two / publish(staged["A"], two))
    assert a1.encoder.model is a2.encoder.model and a1.encoder.source != a2.encoder.source
    assert load_encoder_backend(a1, "onnx-int8") is load_encoder_backend(a2, "onnx-int8")
    assert load_encoder_backend(a1, "onnx") is not load_encoder_backend(a1, "onnx-int8")
    d1 = load_bundle(one / publish(staged_distilled, one))
    d2 = load_bundle(two / publish(staged_distilled, two))
    assert load_encoder_backend(d1, "static") is load_encoder_backend(d2, "static")
    assert load_encoder_backend(d1, "distilled") is load_encoder_backend(d2, "distilled")


def test_a_protected_route_is_401_before_the_collection_is_looked_up(tmp_path):
    """Issue 43 item 8: without the key, an unknown collection answered 404 and a known one 401, which told
    anyone which collections exist; now every protected operation of the spec says 401 for both."""
    with TestClient(_app(tmp_path)) as client:
        spec = client.get("/openapi.json").json()["paths"]
        protected = [
            (method, path)
            for path, ops in spec.items()
            if path.startswith("/collections/{collection}/")
            for method, op in ops.items()
            if op.get("security") and method != "get"  # a GET with a key only shows more
        ]
        assert len(protected) >= 6  # writes, deletes, jobs, activation
        for method, path in protected:
            url = path.replace("{doc_id}", "x").replace("{version}", "20260101T000000.000000Z-abcdef")
            url = url.replace("{job_id}", "0" * 32)
            for name in ("docs", "no-such-collection"):
                r = client.request(method.upper(), url.replace("{collection}", name), json={})
                assert r.status_code == 401, (method, url, name, r.text)
