"""The API's self-description and its HTTP basics (issue 32, item 2): the two key headers as OpenAPI
`securitySchemes` with `security` on the operations that read the key (what gives /docs its Authorize
button), readable and unique operation ids, and HEAD answered wherever GET is.

The spec is checked against the routes themselves (a protected route is one that refuses a request
without the key), not against a list kept here. The app is the real one with its lifespan, on an empty
bundles folder: no model is loaded, so the module runs in seconds and needs no dataset.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings

KEY = "surface-key"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("surface")
    settings = make_settings(root / "bundles", api_key=KEY, queue_url=f"sqlite:///{root / 'jobs.db'}")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def spec(client) -> dict:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def _operations(spec: dict):
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            yield path, method, op


def _concrete(path: str) -> str:
    """A request path for a template: `default` for a collection, a name nothing has for the rest."""
    return re.sub(r"\{[^}]+\}", lambda m: "default" if m.group(0) == "{collection}" else "nope", path)


def test_both_key_headers_are_security_schemes(spec):
    schemes = spec["components"]["securitySchemes"]
    assert {"type": "apiKey", "in": "header", "name": "X-API-Key"}.items() <= schemes["ApiKeyHeader"].items()
    assert {"type": "http", "scheme": "bearer"}.items() <= schemes["BearerKey"].items()


def test_every_mutating_operation_requires_the_key_and_says_so(spec, client):
    """Each operation sent without a key: the ones answering 401 declare the key required (either header
    alone is enough: two requirement objects), and every operation that declares it required answers 401."""
    required = [{"ApiKeyHeader": []}, {"BearerKey": []}]
    refused, declared = set(), set()
    for path, method, op in _operations(spec):
        if op.get("security") == required:
            declared.add((method, path))
        if method == "get" and op.get("security") is None:
            continue  # a read without security: checked below not to need a key
        answer = client.request(method.upper(), _concrete(path), json={})
        if answer.status_code == 401:
            refused.add((method, path))
    assert declared == refused
    for method, path in declared:  # and a wrong key, in either header, is 403
        for header in ({"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}):
            answer = client.request(method.upper(), _concrete(path), json={}, headers=header)
            assert answer.status_code == 403, (method, path, header)
    assert ("post", "/documents") in declared and ("delete", "/documents/{doc_id}") in declared
    assert ("post", "/collections/{collection}/bundles/{version}/activate") in declared
    assert len(declared) >= 14


def test_reads_that_say_more_to_the_key_holder_declare_the_key_optional(spec, client):
    optional = [{}, {"ApiKeyHeader": []}, {"BearerKey": []}]
    assert spec["paths"]["/jobs"]["get"]["security"] == optional
    assert spec["paths"]["/collections/{collection}/jobs"]["get"]["security"] == optional
    assert client.get("/jobs").status_code == 200  # no key: answered (the `{}` requirement)
    assert client.get("/jobs", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert client.get("/jobs", headers={"X-API-Key": "wrong"}).status_code == 403


def test_public_operations_declare_no_security(spec):
    for path in ("/search", "/embed", "/v1/embeddings"):
        assert "security" not in spec["paths"][path]["post"], path
    assert "security" not in spec["paths"]["/healthz"]["get"]


def test_operation_ids_are_readable_and_unique(spec):
    ids = [op["operationId"] for _, _, op in _operations(spec)]
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    by_route = {(m, p): op["operationId"] for p, m, op in _operations(spec)}
    assert by_route["post", "/search"] == "search"
    assert by_route["post", "/documents"] == "upsert_documents"
    assert by_route["delete", "/documents/{doc_id}"] == "delete_document"
    assert by_route["post", "/documents/delete"] == "delete_documents"
    assert by_route["post", "/bundles/{version}/activate"] == "activate_bundle"
    assert by_route["post", "/collections/{collection}/search"] == "search_in_collection"
    assert (
        by_route["delete", "/collections/{collection}/documents/{doc_id}"] == "delete_document_in_collection"
    )
    # a method name, not path and method run together (FastAPI's default: `search_search_post`)
    for operation_id in ids:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", operation_id), operation_id
        assert not operation_id.endswith(("_get", "_post", "_delete", "_put")), operation_id


def test_head_answers_wherever_get_does(spec, client):
    """Every GET of the spec, and the pages outside it: HEAD has GET's status and headers, no body."""
    paths = [_concrete(p) for p, m, _ in _operations(spec) if m == "get"]
    paths += ["/docs", "/docs/assets/swagger-ui.css", "/openapi.json", "/redoc"]
    seen = Counter()
    for path in paths:
        got = client.get(path, follow_redirects=False)
        head = client.head(path, follow_redirects=False)
        assert head.status_code == got.status_code != 405, path
        assert head.content == b"", path
        assert head.headers.get("content-type") == got.headers.get("content-type"), path
        assert ("content-length" in head.headers) == ("content-length" in got.headers), path
        if path != "/metrics":  # the metrics count the GET just made: a few bytes longer each time
            assert head.headers.get("content-length") == got.headers.get("content-length"), path
        seen[got.status_code // 100] += 1
    assert seen[2] >= 8  # most of them answered 200 (the rest: 404 for names nothing has, 503 no bundle)


def test_head_where_there_is_no_get_is_still_405(client):
    answer = client.head("/search")
    assert answer.status_code == 405
    assert "POST" in answer.headers["allow"]


def test_an_integral_number_is_an_integer_as_the_spec_says(spec, client):
    """JSON Schema's `integer` takes 5.0 (schemathesis sends such values): so does `top_k`; a fraction, a
    boolean or a string is still refused, naming the field."""
    assert spec["components"]["schemas"]["SearchRequest"]["properties"]["top_k"]["type"] == "integer"
    fine = client.post("/search", json={"query": "queues", "top_k": 5.0})
    assert fine.status_code == 503 and fine.json()["error"]["code"] == "no_live_bundle"  # past validation
    for bad in (5.5, True, "5"):
        refused = client.post("/search", json={"query": "queues", "top_k": bad})
        assert refused.status_code == 422, bad
        assert refused.json()["error"]["details"][0]["field"] == "body.top_k"
