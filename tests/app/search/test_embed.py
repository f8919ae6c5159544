"""POST /embed and POST /v1/embeddings through the real app: vectors in the live index's space."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings, publish


@pytest.fixture(scope="module")
def client(live_bundles):
    bundles, _ = live_bundles
    settings = make_settings(bundles, max_batch=4, max_query_chars=300, max_request_tokens=400)
    with TestClient(create_app(settings)) as c:
        yield c


def test_query_and_document_vectors_are_the_models(client, shared_encoder, slice_data, live_bundles):
    from contract.encoding.encoder import document_text

    queries = list(slice_data.queries.values())[:3]
    r = client.post("/embed", json={"input": queries})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["version"], body["metric"], body["kind"], body["dim"]) == (
        live_bundles[1],
        "cosine",
        "query",
        384,
    )
    assert body["encoder"] == "torch"
    np.testing.assert_allclose(body["embeddings"], shared_encoder.encode(queries, kind="query"), atol=1e-5)

    docs = list(slice_data.corpus.values())[:1]  # one: a whole abstract is up to 256 tokens
    texts = [document_text(d.title, d.text) for d in docs]
    r = client.post("/embed", json={"input": texts, "kind": "document"})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["embeddings"], shared_encoder.encode(texts), atol=1e-5)

    one = client.post("/embed", json={"input": queries[0]}).json()  # a single string answers one vector
    assert len(one["embeddings"]) == 1
    # an embedded query searches like the query text itself
    by_text = client.post("/search", json={"query": queries[0], "top_k": 5}).json()["results"][0]["hits"]
    by_vec = client.post("/search", json={"vector": one["embeddings"][0], "top_k": 5}).json()["results"][0][
        "hits"
    ]
    assert [h["id"] for h in by_vec] == [h["id"] for h in by_text]


def test_openai_compatible_route(client, shared_encoder, live_bundles):
    texts = ["vitamin D and bone density", "statins and muscle pain"]
    floats = client.post("/v1/embeddings", json={"input": texts, "model": "infonce-search"})
    assert floats.status_code == 200, floats.text
    body = floats.json()
    assert body["object"] == "list" and body["model"] == live_bundles[1]
    assert [d["index"] for d in body["data"]] == [0, 1] and body["data"][0]["object"] == "embedding"
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 4
    expected = shared_encoder.encode(texts, kind="query")
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], expected, atol=1e-5)

    packed = client.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"}).json()
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in packed["data"]]
    np.testing.assert_allclose(decoded, expected, atol=1e-5)

    # OpenAI's `dimensions`: the first components, L2-normalised again (cosine); more than the model has: all
    short = client.post("/v1/embeddings", json={"input": texts, "dimensions": 256}).json()["data"]
    cut = expected[:, :256] / np.linalg.norm(expected[:, :256], axis=1, keepdims=True)
    np.testing.assert_allclose([d["embedding"] for d in short], cut, atol=1e-5)
    full = client.post("/v1/embeddings", json={"input": texts, "dimensions": 4096}).json()["data"]
    np.testing.assert_allclose([d["embedding"] for d in full], expected, atol=1e-5)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"input": ["a", "b", "c", "d", "e"]}, "body.input: 5 texts, at most 4"),
        ({"input": ["fine", "x" * 301]}, "body.input[1]: longer than this server's limit of 300"),
        ({"input": []}, "body.input"),
        ({"input": ["ok"], "kind": "passage"}, "body.kind"),
        ({"input": [[101, 2023]]}, "body.input"),
    ],
)
def test_limits_and_bad_bodies_are_422_naming_the_field(client, body, expected):
    for route in ("/embed", "/v1/embeddings"):
        r = client.post(route, json=body)
        if route == "/v1/embeddings" and ("kind" in body or body["input"][:1] == [[101, 2023]]):
            continue  # OpenAI's body calls it input_type, and takes token ids (tests/app/search/test_openai_compat.py)
        assert r.status_code == 422, (route, r.text)
        assert expected in r.json()["error"]["message"] or expected in str(
            r.json()["error"].get("details")
        ), r.text


def test_a_request_over_the_token_budget_is_413(client):
    """Within every limit the spec states (issue 27, item 12), over the one it cannot: tokens."""
    for route in ("/embed", "/v1/embeddings"):
        over = client.post(route, json={"input": ["x " * 145] * 3})
        assert over.status_code == 413 and over.json()["error"]["code"] == "token_budget", over.text
        assert "above this server's budget of 400" in over.json()["error"]["message"]


def test_nothing_live_is_503(tmp_path):
    with TestClient(create_app(make_settings(tmp_path / "empty"))) as c:
        r = c.post("/embed", json={"input": "x"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_live_bundle"


def test_aninfonce_vectors_are_sqrt_lambda_scaled(tmp_path, shared_encoder, slice_data, doc_embeddings):
    """For AnInfoNCE the answer is the index's space: sqrt(Lambda) * unit embedding, so -1/2 * squared L2
    between an embedded query and an embedded document is the score /search gives that document."""
    from contract.encoding.encoder import Encoder, Similarity, document_text
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, build_bundle

    lam = np.random.default_rng(1).uniform(0.5, 20.0, 384).astype(np.float32)
    encoder = Encoder(
        shared_encoder.model, Similarity(metric="aninfonce", temperature=None, lam=lam.tolist())
    )
    staged = build_bundle(
        encoder,
        slice_data.corpus,
        staging_dir=tmp_path / "stage",
        doc_embeddings=doc_embeddings,
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )
    version = publish(staged, tmp_path / "bundles")
    query = next(iter(slice_data.queries.values()))
    with TestClient(create_app(make_settings(tmp_path / "bundles"))) as c:
        q = np.asarray(c.post("/embed", json={"input": [query]}).json()["embeddings"][0])
        hit = c.post("/search", json={"query": query, "top_k": 1}).json()["results"][0]["hits"][0]
        doc = slice_data.corpus[hit["id"]]
        body = c.post(
            "/embed", json={"input": [document_text(doc.title, doc.text)], "kind": "document"}
        ).json()
    assert body["version"] == version and body["metric"] == "aninfonce"
    d = np.asarray(body["embeddings"][0])
    np.testing.assert_allclose(
        q, np.sqrt(lam) * shared_encoder.encode([query], kind="query")[0], rtol=1e-4, atol=1e-5
    )
    assert -0.5 * float(((q - d) ** 2).sum()) == pytest.approx(hit["score"], rel=1e-4, abs=1e-4)
    assert abs(float(np.linalg.norm(q)) - 1.0) > 0.5  # scaled, not a unit vector
