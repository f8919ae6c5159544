"""POST /search's pure-ASGI path (app/api/search_fast_path.py) against FastAPI's own route for the same
endpoint, /collections/default/search, through the real app: the same answers, the same errors, the same
metrics, and FastAPI's dependency solving skipped only on the plain path."""

from __future__ import annotations

import base64
import json
import re

import pytest
from fastapi import routing
from fastapi.testclient import TestClient

from app.api import search_fast_path
from app.main import create_app
from tests.app.conftest import make_settings, publish

ROUTED = "/collections/default/search"  # the same endpoint, reached through FastAPI's routing


@pytest.fixture(scope="module")
def app_client(tmp_path_factory, staged_lexical):
    bundles = tmp_path_factory.mktemp("bundles-fast-path")
    publish(staged_lexical, bundles)  # with a lexical index: every mode
    # a 500 is answered, not re-raised into the test, so the server-error layer's answer can be checked
    settings = make_settings(bundles, microbatch_enabled=True, max_request_tokens=64)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def solved(monkeypatch):
    """Counts FastAPI's dependency solving, which only the routed path runs."""
    calls = []
    original = routing.solve_dependencies

    async def counting(*args, **kwargs):
        calls.append(1)
        return await original(*args, **kwargs)

    monkeypatch.setattr(routing, "solve_dependencies", counting)
    return calls


def _without_timings(body: dict) -> dict:
    """The answer less what differs between two calls: the timings, and the signing time in `search_id`."""
    out = {k: v for k, v in body.items() if k != "timings"}
    out["results"] = [{**r, "search_id": _signed(r["search_id"])} for r in body["results"]]
    return out


def _signed(search_id: str) -> dict:
    payload = search_id.split(".")[0]
    signed = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert signed.pop("t") > 0
    return signed


@pytest.mark.parametrize(
    "body",
    [
        {"query": "how do I sort a list", "top_k": 5},
        {"queries": ["open a file", "parse json"], "top_k": 3, "include": ["text", "metadata"]},
        {"query": "hash a string", "mode": "lexical", "filter": {"even": True}, "offset": 2},
        {"query": "hash a string", "mode": "hybrid", "min_score": 0.1},
        {"query": "hash a string"},  # the bundle's default mode
        {"query": "hash a string", "mode": "dense", "filter": {"year": {"gte": 2005}}},
    ],
)
def test_plain_requests_skip_fastapi_and_answer_as_its_route_does(app_client, solved, body):
    fast = app_client.post("/search", json=body)
    assert fast.status_code == 200, fast.text
    assert solved == []  # no dependency solving: the fast path answered
    routed = app_client.post(ROUTED, json=body)
    assert routed.status_code == 200 and solved  # and FastAPI answered this one
    assert _without_timings(fast.json()) == _without_timings(routed.json())
    assert fast.headers["content-type"] == routed.headers["content-type"] == "application/json"
    assert int(fast.headers["content-length"]) == len(fast.content)
    assert set(fast.json()["timings"]) == {"encode_ms", "search_ms", "total_ms"}


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"{not json", "application/json"),
        (b"", "application/json"),
        (b'{"query": "a", "top_k": 0}', "application/json"),
        (b'{"query": "a", "unknown": 1}', "application/json"),
        (b'{"vector": [NaN, 1.0]}', "application/json"),
        (b'{"query": "a"}', "text/plain"),
        (b'{"query": "a"}', "application/json; charset=utf-8"),  # valid, but not the plain case
        (b"\xff\xfe", "application/json"),
        (b"[" * 5000 + b"]" * 5000, "application/json"),
    ],
)
def test_what_the_fast_path_declines_fastapi_answers_as_before(app_client, content, content_type):
    fast = app_client.post("/search", content=content, headers={"content-type": content_type})
    routed = app_client.post(ROUTED, content=content, headers={"content-type": content_type})
    assert fast.status_code == routed.status_code
    assert fast.status_code != 500
    if fast.status_code == 200:
        assert _without_timings(fast.json()) == _without_timings(routed.json())
    else:
        assert fast.json() == routed.json()


def test_the_endpoints_errors_use_the_apps_handlers(app_client, solved):
    r = app_client.post("/search", json={"vector": [0.1, 0.2]})  # not the live model's dimension
    assert r.status_code == 409 and r.json()["error"]["code"] == "dimension_mismatch"
    r = app_client.post("/search", json={"query": "word " * 200})  # over max_request_tokens=64
    assert r.status_code == 413 and r.json()["error"]["code"] == "token_budget"
    assert solved == []  # both raised on the fast path, and answered by the handlers FastAPI would use
    routed = app_client.post(ROUTED, json={"query": "word " * 200})
    assert routed.json() == r.json()


def test_an_unexpected_failure_is_the_generic_500(app_client, monkeypatch):
    async def broken(*args, **kwargs):
        raise RuntimeError("secret detail")

    monkeypatch.setattr(search_fast_path, "search", broken)
    r = app_client.post("/search", json={"query": "a"})
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal" and "secret" not in r.text


def _count(metrics_text: str, route: str, status: str) -> float:
    pattern = (
        rf'^search_http_requests_total\{{method="POST",route="{re.escape(route)}",status="{status}"\}} (\S+)$'
    )
    found = re.search(pattern, metrics_text, re.M)
    return float(found.group(1)) if found else 0.0


def test_requests_are_counted_under_the_search_route(app_client):
    before = app_client.get("/metrics").text
    app_client.post("/search", json={"query": "a"})
    app_client.post("/search", json={"query": "a", "top_k": 0})  # declined: FastAPI's 422
    after = app_client.get("/metrics").text
    assert _count(after, "/search", "200") == _count(before, "/search", "200") + 1
    assert _count(after, "/search", "422") == _count(before, "/search", "422") + 1
    assert _count(after, "unmatched", "200") == _count(before, "unmatched", "200")


def test_head_and_get_are_not_taken(app_client):
    assert app_client.get("/search").status_code == 405
    assert app_client.head("/search").status_code == 405
