"""POST /search through the real app (lifespan, real FAISS, real encoder) against a brute-force oracle."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.engine.query_tokens import QueryTokenizer, encode_token_ids
from app.main import create_app
from tests.app.conftest import make_settings


@pytest.fixture(scope="module")
def client(live_bundles):
    bundles, _ = live_bundles
    with TestClient(create_app(make_settings(bundles, microbatch_enabled=True))) as c:
        yield c


@pytest.fixture(scope="module")
def oracle(shared_encoder, slice_data, doc_embeddings):
    """Brute force: every document's cosine with a query, best first (ties broken by position)."""
    ids = list(slice_data.corpus)

    def top(query_vec: np.ndarray, k: int, allowed: set[str] | None = None) -> list[tuple[str, float]]:
        scores = doc_embeddings @ query_vec  # (n_docs,)
        order = np.lexsort((np.arange(len(ids)), -scores))
        ranked = [(ids[i], float(scores[i])) for i in order if allowed is None or ids[i] in allowed]
        return ranked[:k]

    return top


def _assert_matches(hits: list[dict], expected: list[tuple[str, float]]) -> None:
    assert [h["id"] for h in hits] == [e[0] for e in expected]
    np.testing.assert_allclose([h["score"] for h in hits], [e[1] for e in expected], atol=1e-5)


def test_text_query_matches_brute_force(client, shared_encoder, slice_data, oracle, live_bundles):
    query = next(iter(slice_data.queries.values()))
    r = client.post("/search", json={"query": query, "top_k": 10})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["version"] == live_bundles[1]
    assert body["metric"] == "cosine"
    assert set(body["timings"]) == {"encode_ms", "search_ms", "total_ms"}
    q = shared_encoder.encode([query], kind="query")[0]
    _assert_matches(body["results"][0]["hits"], oracle(q, 10))
    assert "title" not in body["results"][0]["hits"][0]  # not requested


def test_batch_queries_in_order(client, shared_encoder, slice_data, oracle):
    queries = list(slice_data.queries.values())[:5]
    r = client.post("/search", json={"queries": queries, "top_k": 3})
    assert r.status_code == 200, r.text
    vecs = shared_encoder.encode(queries, kind="query")
    results = r.json()["results"]
    assert len(results) == 5
    for res, v in zip(results, vecs, strict=True):
        _assert_matches(res["hits"], oracle(v, 3))


def test_vector_queries(client, doc_embeddings, slice_data, oracle):
    v = doc_embeddings[7]
    r = client.post("/search", json={"vector": v.tolist(), "top_k": 5})
    assert r.status_code == 200, r.text
    hits = r.json()["results"][0]["hits"]
    assert hits[0]["id"] == list(slice_data.corpus)[7]  # a document finds itself first
    _assert_matches(hits, oracle(v, 5))
    r2 = client.post("/search", json={"vectors": [v.tolist(), doc_embeddings[8].tolist()], "top_k": 2})
    assert [res["hits"][0]["id"] for res in r2.json()["results"]] == list(slice_data.corpus)[7:9]


def test_filters_equality_in_list_and_range(client, shared_encoder, slice_data, oracle):
    query = list(slice_data.queries.values())[1]
    q = shared_encoder.encode([query], kind="query")[0]
    docs = slice_data.corpus
    cases = [
        ({"group": "b"}, {d for d, doc in docs.items() if doc.metadata["group"] == "b"}),
        ({"group": ["a", "c"]}, {d for d, doc in docs.items() if doc.metadata["group"] in ("a", "c")}),
        (
            {"year": {"gte": 2005, "lt": 2010}},
            {d for d, doc in docs.items() if 2005 <= doc.metadata["year"] < 2010},
        ),
        (
            {"even": True, "group": {"in": ["a"]}},
            {d for d, doc in docs.items() if doc.metadata["even"] and doc.metadata["group"] == "a"},
        ),
    ]
    for flt, allowed in cases:
        r = client.post("/search", json={"query": query, "top_k": 8, "filter": flt, "include": ["metadata"]})
        assert r.status_code == 200, (flt, r.text)
        hits = r.json()["results"][0]["hits"]
        _assert_matches(hits, oracle(q, 8, allowed))
        assert all(docs[h["id"]].metadata == h["metadata"] for h in hits)


def test_min_score_and_include(client, shared_encoder, slice_data, oracle):
    query = list(slice_data.queries.values())[2]
    q = shared_encoder.encode([query], kind="query")[0]
    full = oracle(q, 50)
    cut = (full[10][1] + full[11][1]) / 2  # midway: keeps exactly the first 11 whatever float rounding does
    r = client.post(
        "/search", json={"query": query, "top_k": 50, "min_score": cut, "include": ["title", "text"]}
    )
    hits = r.json()["results"][0]["hits"]
    _assert_matches(hits, [e for e in full if e[1] >= cut])
    assert len(hits) == 11
    doc = slice_data.corpus[hits[0]["id"]]
    assert hits[0]["title"] == doc.title and hits[0]["text"] == doc.text
    assert "metadata" not in hits[0]


def test_top_k_larger_than_corpus_returns_everything(client, slice_data, shared_encoder, oracle):
    n = len(slice_data.corpus)
    query = list(slice_data.queries.values())[3]
    r = client.post("/search", json={"query": query, "top_k": 1000})
    hits = r.json()["results"][0]["hits"]
    assert len(hits) == n
    assert len({h["id"] for h in hits}) == n
    _assert_matches(hits, oracle(shared_encoder.encode([query], kind="query")[0], 1000))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"top_k": 3}, "body"),  # no query at all
        ({"query": "a", "vector": [0.1]}, "body"),  # two inputs
        ({"query": ""}, "body.query"),
        ({"query": "a", "top_k": 0}, "body.top_k"),
        ({"query": "a", "top_k": 1001}, "body.top_k"),
        ({"query": "a", "include": ["nope"]}, "body.include.0"),
        ({"query": "a", "filter": {"year": {"between": 1}}}, "body.filter.year"),
        ({"query": "a", "unknown": 1}, "body.unknown"),
        ({"queries": []}, "body.queries"),
    ],
)
def test_malformed_bodies_are_422_naming_the_field(client, body, field):
    r = client.post("/search", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_request"
    assert any(d["field"].startswith(field) for d in err["details"]), err


def test_other_bad_inputs_are_4xx_not_500(client):
    r = client.post("/search", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    r = client.post("/search", json={"vector": [0.1, 0.2]})  # not the live model's dimension
    assert r.status_code == 409 and "body.vector" in r.json()["error"]["message"]
    nan_body = json.dumps({"vector": [float("nan")] * 384})  # NaN is not JSON, but Python's parser takes it
    r = client.post("/search", content=nan_body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    r = client.post("/search", json={"query": "a", "filter": {"bad field!": 1}})
    assert r.status_code == 422 and "bad field!" in r.json()["error"]["message"]
    r = client.post("/search", json={"queries": ["a"] * 65})  # above max_batch (64)
    assert r.status_code == 422 and "body.queries" in r.json()["error"]["message"]
    r = client.get("/no-such-route")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_body_too_large_is_413(client):
    big = {"query": "x", "filter": {"group": ["a" * 100] * 20_000}}  # ~2 MB > 1 MB default
    r = client.post("/search", json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks():  # no Content-Length: the streamed size is what counts
        for _ in range(30):
            yield b" " * 50_000

    r = client.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_generalization_gap_serves_the_bundle_report(client, staged, live_bundles):
    r = client.get("/generalization-gap")
    assert r.status_code == 200, r.text
    body = r.json()
    on_disk = (staged["A"] / "report" / "report.json").read_text()
    from contract.bundles.report_schema import GapReport

    served = GapReport.model_validate(body["report"])
    # served verbatim, plus which query encoder serves (here the report's own model, torch)
    assert served.served_query_encoder is not None and served.served_query_encoder.backend == "torch"
    assert served.model_copy(update={"served_query_encoder": None}) == GapReport.model_validate_json(on_disk)
    assert body["report"]["theory_terms"]["sample_variability"]["kind"] == "term"  # served as written
    assert body["version"] == live_bundles[1]
    assert body["model"]["metric"] == "cosine" and body["model"]["dim"] == 384


def test_metrics_and_bundles_listing(client, live_bundles, slice_data):
    client.post("/search", json={"query": "metrics probe"})
    text = client.get("/metrics").text
    assert 'search_http_requests_total{method="POST",route="/search",status="200"}' in text
    assert (
        f'search_bundle_info{{encoder_backend="torch",metric="cosine",version="{live_bundles[1]}"}} 1.0'
        in text
    )
    assert f"search_index_vectors {float(len(slice_data.corpus))}" in text
    assert "search_index_recall_at_10_ratio 1.0" in text  # exact index
    assert "search_http_request_duration_seconds_bucket" in text
    listing = client.get("/bundles").json()
    assert listing["live"] == listing["current"] == live_bundles[1]
    assert [v["version"] for v in listing["versions"]] == [live_bundles[1]]
    assert listing["gate_decisions"][0]["version"] == live_bundles[1]
    assert listing["last_failed_load"] is None


def test_health_and_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["canary_hits"] == 1
    spec = client.get("/openapi.json").json()
    assert "/search" in spec["paths"] and "/generalization-gap" in spec["paths"]
    assert "learned similarity" in str(spec["components"]["schemas"]["Hit"])


def test_token_ids_encode_to_the_encoders_own_vectors(shared_encoder):
    """app/engine/query_tokens.py encodes the ids counted for the budget: the vectors are Encoder.encode's,
    bit for bit, whatever the batch (mixed lengths, equal lengths, a text cut at the model's max length)."""
    texts = [
        "vitamin d",
        "  statins and muscle pain  ",
        "x " * 600,
        "a",
        "naïve café",
        "",
        "gene therapy",
    ] * 2
    tokenize = QueryTokenizer(shared_encoder)
    token_ids = tokenize(texts)
    assert len(token_ids[2]) > shared_encoder.model.max_seq_length  # kept whole: each encoder cuts
    for batch_size in (1, 3, 8):
        want = shared_encoder.encode(texts, kind="query", batch_size=batch_size)
        got = encode_token_ids(shared_encoder, texts, token_ids, batch_size=batch_size)
        np.testing.assert_array_equal(got, want)


def test_a_query_is_tokenised_once(client, shared_encoder, oracle, monkeypatch):
    """The route tokenises a text once (its budget); the model encodes those ids without tokenising again."""
    live = client.app.state.hot_swap.live
    tokenised: list[list[str]] = []
    real_tokenize, real_preprocess = live.tokenize, live.encoder.model.preprocess

    def tokenize(texts):
        tokenised.append(list(texts))
        return real_tokenize(texts)

    def preprocess(*args, **kwargs):
        tokenised.append(["(sentence-transformers)"])
        return real_preprocess(*args, **kwargs)

    monkeypatch.setattr(live, "tokenize", tokenize)
    monkeypatch.setattr(live.encoder.model, "preprocess", preprocess)
    queries = ["tokenised once: bone density", "tokenised once: insulin resistance"]  # not in the query cache
    r = client.post("/search", json={"queries": queries, "top_k": 3})
    assert r.status_code == 200, r.text
    assert tokenised == [queries]
    for query, result in zip(queries, r.json()["results"], strict=True):
        _assert_matches(result["hits"], oracle(shared_encoder.encode([query], kind="query")[0], 3))


def test_the_half_precision_scan_answers_as_brute_force(
    live_bundles, doc_embeddings, slice_data, oracle, monkeypatch
):
    """SEARCH_INDEX_HALF_SCAN: the live flat index's fp16 copy answers single queries, filtered or not,
    exactly (oracle: brute force); GET /bundles and the collections' memory count show it, and nothing with
    the setting off. The test corpus is far below the 4 MiB the copy pays from, so that threshold is lowered
    here (an edge fake, for speed)."""
    import contract.index.half_scan as half_scan

    monkeypatch.setattr(half_scan, "HALF_SCAN_FROM_BYTES", 0)
    bundles, _ = live_bundles
    n = len(slice_data.corpus)
    group_b = {d for d, doc in slice_data.corpus.items() if doc.metadata["group"] == "b"}
    resident = {}
    for on in (True, False):
        app = create_app(make_settings(bundles, index_half_scan=on))
        with TestClient(app) as client:
            resident[on] = app.state.collections.resident_bytes()  # the collections' memory budget counts it
            for i in (3, 11, 40):
                v = doc_embeddings[i] + 0.05 * doc_embeddings[i + 1]
                v /= np.linalg.norm(v)
                r = client.post("/search", json={"vector": v.tolist(), "top_k": 7})
                assert r.status_code == 200, r.text
                _assert_matches(r.json()["results"][0]["hits"], oracle(v, 7))
                r = client.post("/search", json={"vector": v.tolist(), "top_k": 5, "filter": {"group": "b"}})
                assert r.status_code == 200, r.text
                _assert_matches(r.json()["results"][0]["hits"], oracle(v, 5, group_b))
            half = client.get("/bundles").json()["serving"]["half_scan"]
        if on:
            assert half["bytes"] == n * doc_embeddings.shape[1] * 2
            assert half["searches"] >= 6 and half["fallbacks"] <= half["searches"]  # filtered ones too
        else:
            assert half is None
    assert resident[True] - resident[False] == n * doc_embeddings.shape[1] * 2
