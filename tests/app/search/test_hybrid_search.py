"""POST /search in lexical and hybrid mode through the real app, against brute force; the default mode,
the 422s, /bundles, and a pre-hybrid bundle (no lexical index) next to one with it: gate, hot swap,
rollback."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.encoding.encoder import document_text
from contract.index.fusion import FusionParams, fuse
from tests.app.conftest import check_a_write_in_every_mode, doc_metadata, make_settings, publish, wait_until
from tests.contract.index.test_lexical_index import brute_force

KEY = {"X-API-Key": "test-key"}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, staged, staged_lexical) -> tuple:
    """A folder where the pre-hybrid bundle A went live first, then L through the gate."""
    folder = tmp_path_factory.mktemp("bundles-hybrid")
    old = publish(staged["A"], folder)
    new = publish(staged_lexical, folder, force=False)
    return folder, old, new


@pytest.fixture(scope="module")
def client(bundles):
    with TestClient(create_app(make_settings(bundles[0], microbatch_enabled=True))) as c:
        yield c


@pytest.fixture(scope="module")
def manifest(staged_lexical) -> dict:
    return json.loads((staged_lexical / "manifest.json").read_text())


@pytest.fixture(scope="module")
def texts(slice_data) -> list[str]:
    return [document_text(d.title, d.text) for d in slice_data.corpus.values()]


def _lexical_oracle(texts, query, k, allowed=None):
    scores = brute_force(texts, query)
    keep = [i for i in range(len(texts)) if scores[i] > 0 and (allowed is None or i in allowed)]
    return sorted(keep, key=lambda i: (-scores[i], i))[:k], scores


def test_the_gate_compared_served_modes_and_the_new_bundle_went_live(client, bundles, manifest):
    _, old, new = bundles
    body = client.get("/bundles").json()
    assert body["live"] == new
    entry = {e["version"]: e for e in body["versions"]}
    retrieval = entry[new]["retrieval"]
    assert retrieval["default_mode"] in ("dense", "lexical", "hybrid")
    assert retrieval["fusion"]["method"] in ("rrf", "convex") and retrieval["validation"]["n_queries"] == 15
    assert set(retrieval["validation"]["rrf_k"]) and set(retrieval["validation"]["convex_alpha"])
    assert entry[old]["retrieval"] is None  # pre-hybrid: dense only
    for mode in ("dense", "lexical", "hybrid"):
        assert 0 < entry[new]["metrics"][f"test.{mode}"]["ndcg@10"] <= 1
    assert entry[new]["metrics"]["test"] == entry[new]["metrics"][f"test.{retrieval['default_mode']}"]
    gate = entry[new]["gate"]
    assert (
        gate["accepted"]
        and gate["candidate_mode"] == retrieval["default_mode"]
        and gate["live_mode"] == "dense"
    )
    assert gate["candidate_value"] == pytest.approx(entry[new]["metrics"]["test"]["ndcg@10"])


def test_default_mode_answers_and_says_so(client, manifest, slice_data):
    query = next(iter(slice_data.queries.values()))
    r = client.post("/search", json={"query": query, "top_k": 5})
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == manifest["extras"]["retrieval"]["default_mode"]


def test_lexical_with_filter_min_score_and_include_matches_brute_force(client, slice_data, texts):
    ids = list(slice_data.corpus)
    allowed = {i for i in range(len(ids)) if doc_metadata(i)["group"] == "a"}
    for query in list(slice_data.queries.values())[:3]:
        want, scores = _lexical_oracle(texts, query, 7, allowed)
        r = client.post(
            "/search",
            json={
                "query": query,
                "top_k": 7,
                "mode": "lexical",
                "filter": {"group": "a"},
                "include": ["title"],
            },
        )
        assert r.status_code == 200, r.text
        hits = r.json()["results"][0]["hits"]
        # the scores are BM25's (the oracle's), and the answer says so, not the model's metric (issue 44)
        assert r.json()["mode"] == "lexical" and r.json()["score_kind"] == "bm25"
        assert r.json()["metric"] == "cosine"  # still the model's similarity, for the dense side
        np.testing.assert_allclose([h["score"] for h in hits], [scores[i] for i in want], rtol=1e-5)
        assert {h["id"] for h in hits} <= {ids[i] for i in allowed}
        assert all(h["title"] == slice_data.corpus[h["id"]].title for h in hits)
        cut = float(scores[want[2]])  # min_score: the BM25 score itself
        r = client.post("/search", json={"query": query, "top_k": 7, "mode": "lexical", "min_score": cut})
        assert all(h["score"] >= cut - 1e-6 for h in r.json()["results"][0]["hits"])
        assert len(r.json()["results"][0]["hits"]) >= 3


def test_hybrid_with_filter_matches_brute_force_fusion(
    client, slice_data, texts, shared_encoder, doc_embeddings, manifest
):
    params = FusionParams.from_record(manifest["extras"]["retrieval"]["fusion"])
    ids = list(slice_data.corpus)
    allowed = sorted(i for i in range(len(ids)) if doc_metadata(i)["year"] >= 2010)
    queries = list(slice_data.queries.values())[:4]
    r = client.post(
        "/search",
        json={"queries": queries, "top_k": 10, "mode": "hybrid", "filter": {"year": {"gte": 2010}}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == "hybrid" and len(r.json()["results"]) == 4
    assert r.json()["score_kind"] == params.method  # the fusion whose scores the oracle below computes
    qv = shared_encoder.encode(queries, kind="query")
    for query, q, result in zip(queries, qv, r.json()["results"], strict=True):
        dense_scores = doc_embeddings[allowed] @ q
        order = np.lexsort((allowed, -dense_scores))[: params.depth]
        dense = (np.array(allowed)[order], dense_scores[order])
        lex_pos, lex_scores = _lexical_oracle(texts, query, params.depth, set(allowed))
        lexical = (np.array(lex_pos, dtype=np.int64), lex_scores[lex_pos].astype(np.float32))
        want_pos, want_sc = fuse(dense, lexical, params, 10)
        hits = result["hits"]
        np.testing.assert_allclose([h["score"] for h in hits], want_sc, rtol=1e-4, atol=1e-6)
        assert [h["id"] for h in hits][:3] == [ids[p] for p in want_pos][:3]
        assert {h["id"] for h in hits} <= {ids[i] for i in allowed}


def test_vector_queries_are_dense_and_refuse_word_modes(client, shared_encoder):
    vec = shared_encoder.encode(["vitamin d"], kind="query")[0].tolist()
    r = client.post("/search", json={"vector": vec, "top_k": 3})
    assert r.status_code == 200 and r.json()["mode"] == "dense"
    assert r.json()["score_kind"] == r.json()["metric"] == "cosine"
    for mode in ("lexical", "hybrid"):
        r = client.post("/search", json={"vector": vec, "mode": mode})
        assert r.status_code == 422 and "body.mode" in r.json()["error"]["message"], r.text
    r = client.post("/search", json={"query": "x", "mode": "sparse"})
    assert r.status_code == 422 and "mode" in r.text


def test_rollback_to_a_pre_hybrid_bundle_serves_dense_and_refuses_lexical(client, bundles, slice_data):
    _, old, new = bundles
    query = next(iter(slice_data.queries.values()))
    try:
        assert client.post(f"/bundles/{old}/activate", headers=KEY).status_code == 200
        r = client.post("/search", json={"query": query, "top_k": 3})
        assert r.status_code == 200 and r.json()["mode"] == "dense" and r.json()["version"] == old
        r = client.post("/search", json={"query": query, "mode": "lexical"})
        assert r.status_code == 422 and "no lexical index" in r.json()["error"]["message"]
    finally:
        assert client.post(f"/bundles/{new}/activate", headers=KEY).status_code == 200
    r = client.post("/search", json={"query": query, "top_k": 3, "mode": "lexical"})
    assert r.status_code == 200 and r.json()["version"] == new and r.json()["mode"] == "lexical"


def test_hot_swap_to_a_lexical_bundle_brings_its_modes(tmp_path, staged, staged_lexical, slice_data):
    query = next(iter(slice_data.queries.values()))
    publish(staged["A"], tmp_path)
    with TestClient(create_app(make_settings(tmp_path))) as c:
        assert c.post("/search", json={"query": query, "mode": "hybrid"}).status_code == 422
        new = publish(staged_lexical, tmp_path)  # published by another process: picked up by the poll
        wait_until(lambda: c.get("/readyz").json().get("version") == new, what="the swap")
        r = c.post("/search", json={"query": query, "mode": "hybrid", "top_k": 3})
        assert r.status_code == 200 and r.json()["mode"] == "hybrid" and r.json()["version"] == new


def test_deleted_documents_leave_lexical_and_hybrid_lists(tmp_path, staged_lexical, slice_data, texts):
    """A document deleted through /documents (contract/mutations/overlay.py) is kept out of the BM25 list too: lexical
    mode equals brute-force BM25 over the remaining documents, and hybrid never returns it."""
    query = next(iter(slice_data.queries.values()))
    ids = list(slice_data.corpus)
    publish(staged_lexical, tmp_path)
    with TestClient(create_app(make_settings(tmp_path))) as c:
        first = c.post("/search", json={"query": query, "mode": "lexical", "top_k": 5}).json()
        gone = first["results"][0]["hits"][0]["id"]
        assert c.delete(f"/documents/{gone}", headers=KEY).status_code == 200
        allowed = {i for i, d in enumerate(ids) if d != gone}
        expected, _ = _lexical_oracle(texts, query, 5, allowed)
        r = c.post("/search", json={"query": query, "mode": "lexical", "top_k": 5}).json()
        assert [h["id"] for h in r["results"][0]["hits"]] == [ids[i] for i in expected]
        r = c.post("/search", json={"query": query, "mode": "hybrid", "top_k": 10}).json()
        hybrid = [h["id"] for h in r["results"][0]["hits"]]
        assert gone not in hybrid and len(hybrid) == 10


def test_a_filtered_hybrid_query_evaluates_its_filter_once(client, slice_data, monkeypatch):
    """Both lists of hybrid search take the request's one Scope (contract/mutations/overlay.py): the metadata
    filter runs once on the live bundle's real docstore, not once for BM25 and again for the dense side."""
    docstore = client.app.state.hot_swap.live.bundle.docstore
    real = docstore.filter_positions
    calls = []

    def counted(flt):
        calls.append(flt)
        return real(flt)

    monkeypatch.setattr(docstore, "filter_positions", counted)
    queries = list(slice_data.queries.values())[:2]
    flt = {"year": {"gte": 2010}}
    r = client.post("/search", json={"queries": queries, "top_k": 5, "mode": "hybrid", "filter": flt})
    assert r.status_code == 200, r.text
    assert all(result["hits"] for result in r.json()["results"])
    assert len(calls) == 1 and calls[0] == flt, calls


def test_a_written_document_is_found_in_every_mode_at_once_and_in_none_after_its_delete(
    tmp_path, staged_lexical
):
    """Issue 27, item 11: an acknowledged write is findable in the default mode, whatever it is."""
    bundles = tmp_path / "bundles"
    publish(staged_lexical, bundles)
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        check_a_write_in_every_mode(client, KEY)
