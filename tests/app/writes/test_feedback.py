"""POST /feedback against the real app: a judgment tied to a /search answer by its signed search_id, bad
items refused with nothing stored, two app instances on one folder sharing the store, and a judgment
acknowledged by a real server process surviving its kill -9."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.feedback import search_id
from contract.feedback.store import FeedbackStore
from tests.app.conftest import make_settings, publish
from tests.app.writes.test_documents_replicas import Replica

KEY = {"X-API-Key": "test-key"}


def _store(bundles) -> FeedbackStore:
    return FeedbackStore(bundles, max_rows=10**6, retention_s=1e9)


@pytest.fixture()
def bundles(tmp_path, staged):
    folder = tmp_path / "bundles"
    publish(staged["A"], folder)
    return folder


def _search(client, query="how to sort a list"):
    r = client.post("/search", json={"query": query, "top_k": 5})
    assert r.status_code == 200, r.text
    result = r.json()["results"][0]
    return result["search_id"], [h["id"] for h in result["hits"]], r.json()["version"]


def test_judgment_of_a_search_records_version_mode_and_rank(bundles):
    with TestClient(create_app(make_settings(bundles))) as client:
        sid, ids, version = _search(client)
        body = {
            "judgments": [
                {"query": "how to sort a list", "document_id": ids[1], "relevant": True, "search_id": sid},
                {"query": "how to sort a list", "document_id": ids[0], "relevant": 1},
            ]
        }
        r = client.post("/feedback", json=body, headers=KEY)
        assert r.status_code == 200, r.text
        assert r.json()["stored"] == 2 and r.json()["total"] == 2
        scoped = client.post("/collections/default/feedback", json=body, headers=KEY)
        assert scoped.status_code == 200, scoped.text
        assert client.post("/feedback", json=body).status_code == 401
    rows = _store(bundles).judgments()
    assert (rows[0].doc_id, rows[0].grade, rows[0].version, rows[0].mode, rows[0].rank) == (
        ids[1],
        3,
        version,
        "dense",
        2,
    )
    assert (rows[1].grade, rows[1].version, rows[1].rank) == (1, None, None)
    assert len(rows) == 4


def test_bad_items_are_refused_naming_item_and_field_and_nothing_is_stored(bundles):
    with TestClient(create_app(make_settings(bundles))) as client:
        sid, ids, _ = _search(client)
        payload, _, mac = sid.partition(".")
        forged = search_id.sign(b"x" * 32, search_id.verify(search_id.load_secret(bundles), sid))
        good = {"query": "q", "document_id": ids[0], "relevant": False, "search_id": sid}
        cases = {
            "search_id": dict(good, search_id=forged),
            "document_id": dict(good, document_id="no-such-doc"),
            "query": dict(good, query="   "),
        }
        for field, bad in cases.items():
            r = client.post("/feedback", json={"judgments": [good, bad]}, headers=KEY)
            assert r.status_code == (422 if field == "query" else 404), r.text
            assert f"judgments[1].{field}" in r.text
        tampered = dict(good, search_id=payload[:-2] + "AA." + mac)
        r = client.post("/feedback", json={"judgments": [tampered]}, headers=KEY)
        assert r.status_code == 404 and "judgments[0].search_id" in r.text
        empty = client.post("/feedback", json={"judgments": []}, headers=KEY)
        assert empty.status_code == 422
    assert _store(bundles).count() == 0


def test_feedback_key_may_send_judgments_only(bundles):
    settings = make_settings(bundles, feedback_key="front-end")
    with TestClient(create_app(settings)) as client:
        _, ids, _ = _search(client)
        body = {"judgments": [{"query": "q", "document_id": ids[0], "relevant": True}]}
        assert client.post("/feedback", json=body, headers={"X-API-Key": "front-end"}).status_code == 200
        assert client.post("/feedback", json=body, headers={"X-API-Key": "wrong"}).status_code == 403
        upsert = {"documents": [{"id": "x", "text": "t"}]}
        assert client.post("/documents", json=upsert, headers={"X-API-Key": "front-end"}).status_code == 403


def test_two_app_instances_on_one_folder_share_judgments_and_search_ids(bundles):
    with (
        TestClient(create_app(make_settings(bundles))) as a,
        TestClient(create_app(make_settings(bundles))) as b,
    ):
        sid, ids, _ = _search(a)
        body = {"judgments": [{"query": "q", "document_id": ids[0], "relevant": 2, "search_id": sid}]}
        assert b.post("/feedback", json=body, headers=KEY).status_code == 200  # b verifies a's id
        r = a.post("/feedback", json=body, headers=KEY)
        assert r.status_code == 200 and r.json()["total"] == 2


def test_acknowledged_judgment_survives_kill9(tmp_path, staged):
    bundles = tmp_path / "bundles"
    publish(staged["A"], bundles)
    server = Replica(bundles, tmp_path / "server.log").start()
    try:
        hits = server.post("/search", {"query": "open a file", "top_k": 3})["results"][0]
        doc = hits["hits"][0]["id"]
        body = {
            "judgments": [
                {"query": "open a file", "document_id": doc, "relevant": True, "search_id": hits["search_id"]}
            ]
        }
        assert server.post("/feedback", body)["stored"] == 1
        server.kill9()
    finally:
        server.stop()
    rows = _store(bundles).judgments()
    assert [(r.doc_id, r.rank) for r in rows] == [(doc, 1)]
