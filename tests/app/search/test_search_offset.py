"""POST /search's `offset` (issue 32: pagination): page n is exactly the tail of one longer search, in every
mode, for batches, filters and vector queries; the limit on offset + top_k is enforced with a 422 naming
the field and stated in the OpenAPI document."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.schemas.search import MAX_DEPTH
from tests.app.conftest import make_settings, publish

MAX_TOP_K = 40  # this server's SEARCH_MAX_TOP_K: small, so the limit is reached with a small corpus


@pytest.fixture(scope="module")
def client(tmp_path_factory, staged_lexical):
    """Bundle L (BM25 index, tuned fusion) live behind micro-batching, so dense, lexical and hybrid all answer."""
    folder = tmp_path_factory.mktemp("bundles-offset")
    publish(staged_lexical, folder)
    settings = make_settings(folder, microbatch_enabled=True, max_top_k=MAX_TOP_K)
    with TestClient(create_app(settings)) as c:
        yield c


def _hits(client: TestClient, **body) -> list[list[tuple[str, float]]]:
    r = client.post("/search", json=body)
    assert r.status_code == 200, r.text
    return [[(h["id"], h["score"]) for h in q["hits"]] for q in r.json()["results"]]


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_each_page_is_the_tail_of_one_longer_search(client, slice_data, mode):
    # queries with 30 hits (BM25 answers only documents sharing a word with the query, and the demo
    # corpus's one-line queries share words with few documents): every page below is then full
    candidates = list(slice_data.queries.values())[:20]
    found = _hits(client, queries=candidates, top_k=30, mode=mode)
    queries = [q for q, w in zip(candidates, found, strict=True) if len(w) == 30][:3]
    assert len(queries) == 3, [len(w) for w in found]
    whole = _hits(client, queries=queries, top_k=30, mode=mode)
    for offset, top_k in [(0, 10), (10, 10), (20, 10), (7, 13), (29, 1)]:
        page = _hits(client, queries=queries, top_k=top_k, offset=offset, mode=mode)
        assert page == [w[offset : offset + top_k] for w in whole], (offset, top_k)
    # pages side by side cover the ranking once, in order, with nothing repeated or skipped
    pages = [_hits(client, query=queries[0], top_k=10, offset=o, mode=mode)[0] for o in (0, 10, 20)]
    assert [h for p in pages for h in p] == whole[0]


def test_pages_asked_at_once_are_each_answered_as_alone(client, slice_data):
    """Concurrent requests share a micro-batch (one FAISS call, one BM25 product): each keeps its offset."""
    query = next(iter(slice_data.queries.values()))
    whole = {m: _hits(client, query=query, top_k=30, mode=m)[0] for m in ("dense", "lexical", "hybrid")}
    asks = [(m, o) for m in whole for o in (0, 5, 10, 15, 20)]
    with ThreadPoolExecutor(8) as pool:
        pages = list(
            pool.map(lambda a: _hits(client, query=query, top_k=10, offset=a[1], mode=a[0])[0], asks)
        )
    for (mode, offset), page in zip(asks, pages, strict=True):
        assert page == whole[mode][offset : offset + 10], (mode, offset)


def test_offset_works_with_a_filter_and_a_vector_query(client, slice_data, shared_encoder):
    query = next(iter(slice_data.queries.values()))
    flt = {"group": ["a", "b"]}
    whole = _hits(client, query=query, top_k=24, filter=flt, mode="hybrid")[0]
    assert _hits(client, query=query, top_k=12, offset=12, filter=flt, mode="hybrid")[0] == whole[12:]
    vector = shared_encoder.encode([query], kind="query")[0].tolist()
    whole = _hits(client, vector=vector, top_k=20)[0]
    assert _hits(client, vector=vector, top_k=5, offset=15)[0] == whole[15:]


def test_an_integral_float_offset_is_an_integer_as_json_schema_says(client, slice_data):
    query = next(iter(slice_data.queries.values()))
    assert _hits(client, query=query, top_k=3, offset=2.0) == _hits(client, query=query, top_k=3, offset=2)


def test_past_the_last_match_a_page_is_empty(client):
    # a word no document has: lexical finds nothing, so every page of it is empty rather than an error
    assert _hits(client, query="zzqxjv", top_k=5, offset=10, mode="lexical") == [[]]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"top_k": 10, "offset": MAX_TOP_K - 9}, "body.offset", f"above this server's limit of {MAX_TOP_K}"),
        ({"top_k": MAX_TOP_K, "offset": 1}, "body.offset", f"limit of {MAX_TOP_K}"),
        ({"top_k": 10, "offset": -1}, "offset", "greater than or equal to 0"),
        ({"top_k": 10, "offset": "2"}, "offset", "not a string"),
        ({"top_k": 10, "offset": True}, "offset", "not a string or a boolean"),
        ({"top_k": 10, "offset": 1.5}, "offset", "must be an integer"),
        ({"top_k": 10, "offset": MAX_DEPTH - 5}, "offset", f"at most {MAX_DEPTH}"),
    ],
)
def test_an_offset_past_the_limits_is_a_422_naming_it(client, body, field, words):
    r = client.post("/search", json={"query": "vitamin d", **body})
    assert r.status_code == 422, r.text
    text = r.text.replace('"', "")
    assert field in text and words in text, r.text


def test_the_openapi_states_offset_and_its_limit(client):
    spec = client.get("/openapi.json").json()
    offset = spec["components"]["schemas"]["SearchRequest"]["properties"]["offset"]
    # this server's SEARCH_MAX_TOP_K bounds offset (app/api/openapi.py), the sum is stated in words
    assert offset["minimum"] == 0 and offset["maximum"] == MAX_TOP_K - 1 and offset["default"] == 0
    assert "SEARCH_MAX_TOP_K" in offset["description"] and "offset + top_k" in offset["description"]
