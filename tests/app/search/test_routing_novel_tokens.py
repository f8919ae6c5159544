"""A document written through the API is found by dense search whatever query encoder serves (issue 44,
item 1): the static table has untrained rows for words its distillation texts lacked, so a query holding
one goes to the full model (app/engine/query_routing.py), even when the recorded margin routes nothing."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.encoding.query_encoders import SEEN_TOKENS_FILE, SUBDIR, StaticQueryEncoder
from contract.errors import ModelLoadError
from tests.app.conftest import make_settings, publish

KEY = {"X-API-Key": "test-key"}
OFF_TOPIC = {
    "id": "ui-note-2",
    "title": "Axolotl limb regeneration",
    "text": "Axolotls regrow whole limbs, including bone, muscle and nerves, after an amputation.",
}
QUERY = "which animal regrows its limbs?"


def test_the_static_table_records_the_tokens_it_was_distilled_on(staged_distilled):
    folder = staged_distilled / SUBDIR / "static"
    static = StaticQueryEncoder.load(folder)
    assert static.seen is not None and static.seen.shape == (len(static.table),)
    assert 0 < static.seen.sum() < len(static.seen)  # some of the vocabulary, not all of it
    seen_id = int(np.flatnonzero(static.seen)[0])
    unseen_id = int(np.flatnonzero(~static.seen)[-1])
    assert static.novel([[seen_id], [seen_id, unseen_id], []]).tolist() == [False, True, False]
    # with special tokens around them, as the request's tokenisation gives them
    assert static.novel_ids([[101, seen_id, 102], [101, unseen_id, 102]]).tolist() == [False, True]


@pytest.fixture(scope="module")
def routed_client(tmp_path_factory, staged_distilled):
    bundles = tmp_path_factory.mktemp("bundles-novel")
    publish(staged_distilled, bundles)
    # route_margin 0: the margin alone escalates nothing, so only the novel-token rule can
    settings = make_settings(
        bundles, encoder_backend="static-routed", route_margin=0.0, reload_poll_seconds=0
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_written_off_topic_document_is_found_by_dense_search_through_the_static_router(routed_client):
    client = routed_client
    static = client.app.state.hot_swap.live.query_encoder.cheap
    ids = static.tokenizer.encode(QUERY, add_special_tokens=False).ids
    assert static.novel([ids]).tolist() == [True], "the query should hold a word the slice lacks"
    written = client.post("/documents", json={"documents": [OFF_TOPIC]}, headers=KEY)
    assert written.status_code == 200, written.text
    before = client.get("/bundles").json()["encoder_choice"]["routing"]["counts"]
    r = client.post("/search", json={"query": QUERY, "top_k": 3, "mode": "dense"})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["hits"][0]["id"] == OFF_TOPIC["id"]
    after = client.get("/bundles").json()["encoder_choice"]["routing"]["counts"]
    assert after["novel"] == before["novel"] + 1 and after["routed"] == before["routed"] + 1


def test_a_query_of_known_words_stays_on_the_static_table(routed_client):
    client = routed_client
    static = client.app.state.hot_swap.live.query_encoder.cheap
    words = [w for w in static.tokenizer.get_vocab() if w.isalpha() and len(w) > 4]
    known = next(w for w in sorted(words) if static.seen[static.tokenizer.token_to_id(w)])
    before = client.get("/bundles").json()["encoder_choice"]["routing"]["counts"]
    assert client.post("/search", json={"query": known, "mode": "dense"}).status_code == 200
    after = client.get("/bundles").json()["encoder_choice"]["routing"]["counts"]
    assert after["routed"] == before["routed"] and after["queries"] == before["queries"] + 1


def test_a_bundle_without_the_record_loads_and_routes_by_margin_only(tmp_path, staged_distilled):
    folder = tmp_path / "static"
    shutil.copytree(staged_distilled / SUBDIR / "static", folder)
    (folder / SEEN_TOKENS_FILE).unlink()
    static = StaticQueryEncoder.load(folder)
    assert static.seen is None and static.novel([[5, 6]]).tolist() == [False]
    np.save(folder / SEEN_TOKENS_FILE, np.ones(3, dtype=np.uint8))
    with pytest.raises(ModelLoadError, match="table of"):
        StaticQueryEncoder.load(folder)
