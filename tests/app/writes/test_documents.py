"""POST/DELETE/GET /documents against the real app (TestClient + lifespan), real encoder, real FAISS.

The oracle test checks search over bundle + mutation overlay against brute force over the document set
the mutations leave; the bad-input tests check that a refused request leaves the log untouched.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings, publish

KEY = {"X-API-Key": "test-key"}


@pytest.fixture()
def client(tmp_path, staged):
    bundles = tmp_path / "bundles"
    publish(staged["B"], bundles)  # plain bundle: the torch encoder, no ONNX timing at load
    with TestClient(create_app(make_settings(bundles, max_documents_batch=8, max_document_chars=500))) as c:
        yield c


def search(client, **body):
    r = client.post("/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["hits"]


def log_seq(client) -> int:
    return client.get("/bundles").json()["mutations"]["log_seq"]


def test_upsert_is_found_by_text_filter_and_get(client):
    doc = {
        "id": "new-1",
        "title": "Axolotl regeneration",
        "text": "Axolotls regrow whole limbs, spinal cord and parts of the heart after injury.",
        "metadata": {"group": "zz", "year": 1999},
    }
    r = client.post("/documents", json={"documents": [doc]}, headers=KEY)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["applied"] == 1 and answer["seq"] == answer["first_seq"] == 1
    assert answer["live_seq"] >= answer["seq"]  # read-your-writes: applied before the answer
    hits = search(client, query="How do axolotls regrow limbs?", top_k=3, include=["text", "metadata"])
    assert hits[0]["id"] == "new-1"
    assert hits[0]["metadata"] == {"group": "zz", "year": 1999}
    only = search(client, query="anything at all", top_k=5, filter={"group": "zz"})
    assert [h["id"] for h in only] == ["new-1"]
    ranged = search(client, query="regeneration", top_k=50, filter={"year": {"lt": 2000}})
    assert [h["id"] for h in ranged] == ["new-1"]  # the bundle's documents are all 2000-2019
    got = client.get("/documents/new-1").json()
    assert got["text"] == doc["text"] and got["seq"] == 1 and got["metadata"]["group"] == "zz"


def test_replace_changes_text_and_metadata_everywhere(client):
    first = search(client, query="vitamin d bone density", top_k=1, include=["text", "metadata"])[0]
    old_group = first["metadata"]["group"]
    new = {
        "id": first["id"],
        "text": "Octopus arms contain most of the animal's neurons.",
        "metadata": {"group": "q"},
    }
    assert client.post("/documents", json={"documents": [new]}, headers=KEY).status_code == 200
    hits = search(client, query="vitamin d bone density", top_k=20)
    assert first["id"] not in [h["id"] for h in hits[:1]]
    octo = search(client, query="octopus neurons in arms", top_k=2, include=["text"])
    assert octo[0]["id"] == first["id"] and octo[0]["text"] == new["text"]
    old_filtered = search(client, query="vitamin d bone density", top_k=200, filter={"group": old_group})
    assert first["id"] not in [h["id"] for h in old_filtered]  # its old metadata no longer matches
    ids = [h["id"] for h in search(client, query="octopus neurons", top_k=300)]
    assert ids.count(first["id"]) == 1  # replaced, not duplicated
    assert client.get(f"/documents/{first['id']}").json()["seq"] == 1


def test_delete_hides_documents_and_top_k_stays_full(client):
    before = search(client, query="vitamin d bone density", top_k=10)
    gone = [h["id"] for h in before[:4]]
    r = client.request("DELETE", f"/documents/{gone[0]}", headers=KEY)
    assert r.status_code == 200 and r.json()["not_found"] == []
    r = client.post("/documents/delete", json={"ids": gone[1:] + ["never-existed"]}, headers=KEY)
    assert r.status_code == 200, r.text
    assert r.json()["applied"] == 3 and r.json()["not_found"] == ["never-existed"]
    after = search(client, query="vitamin d bone density", top_k=10)
    assert len(after) == 10
    assert not {h["id"] for h in after} & set(gone)
    assert [h["id"] for h in after[:6]] == [h["id"] for h in before[4:]]  # the rest moved up, in order
    assert client.get(f"/documents/{gone[0]}").status_code == 404
    again = client.request("DELETE", f"/documents/{gone[0]}", headers=KEY)  # idempotent
    assert again.status_code == 200 and again.json()["not_found"] == [gone[0]]
    assert again.json()["applied"] == 0  # nothing was deleted: not also "applied: 1" (issue 32)


def test_oracle_random_mutations_equal_brute_force(client, shared_encoder, slice_data):
    """After random upserts / deletes, every search equals exact search over the resulting documents."""
    from contract.encoding.encoder import document_text

    rng = random.Random(18)
    live = client.app.state.hot_swap.live
    ids = list(live.bundle.doc_ids)
    base = live.bundle.index.index.reconstruct_n(0, len(ids))  # (n, dim) the bundle's exact rows
    docs = {
        d: (base[i], live.bundle.docstore.get([i], ["metadata"])[0]["metadata"]) for i, d in enumerate(ids)
    }
    texts = [doc.text for doc in slice_data.corpus.values()]
    for step in range(12):
        if rng.random() < 0.4:
            victims = rng.sample(sorted(docs), 3)
            r = client.post("/documents/delete", json={"ids": victims}, headers=KEY)
            assert r.status_code == 200, r.text
            for v in victims:
                docs.pop(v)
        else:
            batch = []
            for j in range(rng.randint(1, 4)):
                doc_id = rng.choice(sorted(docs)) if rng.random() < 0.5 else f"new-{step}-{j}"
                if doc_id in (d["id"] for d in batch):
                    continue
                words = rng.choice(texts).split()
                rng.shuffle(words)
                meta = {"group": rng.choice("abcx"), "year": rng.randint(1990, 2030)}
                batch.append({"id": doc_id, "title": "", "text": " ".join(words[:30]), "metadata": meta})
            r = client.post("/documents", json={"documents": batch}, headers=KEY)
            assert r.status_code == 200, r.text
            vecs = shared_encoder.encode(
                [document_text(d["title"], d["text"]) for d in batch], kind="document"
            )
            for d, v in zip(batch, vecs, strict=True):
                docs[d["id"]] = (v, d["metadata"])
    names = sorted(docs)
    matrix = np.stack([docs[n][0] for n in names])  # (n_docs, dim)
    queries = shared_encoder.encode(list(slice_data.queries.values())[:8], kind="query")
    for q in queries:
        for flt in (None, {"group": "x"}, {"year": {"gte": 2010}}):
            allowed = [i for i, n in enumerate(names) if _matches(docs[n][1], flt)]
            scores = matrix[allowed] @ q
            order = np.argsort(-scores)[:10]
            want = [(names[allowed[i]], float(scores[i])) for i in order]
            body = {"vector": q.tolist(), "top_k": 10} | ({"filter": flt} if flt else {})
            got = [(h["id"], h["score"]) for h in search(client, **body)]
            assert len(got) == len(want)
            assert np.allclose([s for _, s in got], [s for _, s in want], atol=2e-5)
            # ids agree except where two scores tie within float noise
            for (gid, gs), (wid, ws) in zip(got, want, strict=True):
                assert gid == wid or abs(gs - ws) < 2e-5, (gid, wid, flt)


def _matches(meta, flt) -> bool:
    if not flt:
        return True
    if "group" in flt:
        return meta.get("group") == flt["group"]
    return meta.get("year", -1) >= flt["year"]["gte"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"documents": []}, "body.documents"),
        ({"documents": [{"id": "a", "text": 5}]}, "body.documents.0.text"),
        ({"documents": [{"id": "", "text": "x"}]}, "body.documents.0.id"),
        ({"documents": [{"id": "a", "text": "x", "metadata": [1]}]}, "body.documents.0.metadata"),
        ({"documents": [{"id": "a", "text": "x", "extra": 1}]}, "body.documents.0.extra"),
        ({"docs": []}, "body.documents"),
    ],
)
def test_malformed_upserts_name_the_field_and_write_nothing(client, body, field):
    r = client.post("/documents", json=body, headers=KEY)
    assert r.status_code == 422, r.text
    assert field in r.json()["error"]["message"]
    assert log_seq(client) == 0


def test_limits_and_keys_are_refused_before_anything_is_written(client):
    ok = {"id": "a", "text": "fine"}
    cases = [
        ({"documents": [ok] * 1 + [{"id": f"b{i}", "text": "x"} for i in range(8)]}, KEY, 422, "at most 8"),
        ({"documents": [{"id": "a", "text": "x" * 501}]}, KEY, 422, "documents[0].text"),
        ({"documents": [ok]}, {}, 401, "API key"),
        ({"documents": [ok]}, {"X-API-Key": "wrong"}, 403, "wrong API key"),
    ]
    for body, headers, status, text in cases:
        r = client.post("/documents", json=body, headers=headers)
        assert r.status_code == status, r.text
        assert text in r.json()["error"]["message"]
    nan = client.post(
        "/documents",
        content=b'{"documents": [{"id": "a", "text": "x", "metadata": {"v": NaN}}]}',
        headers=KEY | {"content-type": "application/json"},
    )
    assert nan.status_code == 422 and "finite" in nan.json()["error"]["message"]
    r = client.post("/documents/delete", json={"ids": [f"x{i}" for i in range(9)]}, headers=KEY)
    assert r.status_code == 422 and "at most 8" in r.json()["error"]["message"]
    assert client.request("DELETE", "/documents/a").status_code == 401
    assert log_seq(client) == 0
    assert client.get("/documents/a").status_code == 404


def test_an_id_twice_in_one_batch_is_written_once_as_its_later_entry(client):
    """JSON Schema cannot say "unique by id", so the spec allows it and the server does too (issue 27,
    item 12): the later entry wins, as two upserts in a row would, in one log row."""
    docs = [{"id": "twice", "text": "first words"}, {"id": "twice", "text": "second words"}]
    r = client.post("/documents", json={"documents": docs}, headers=KEY)
    assert r.status_code == 200 and r.json()["applied"] == 1, r.text
    assert client.get("/documents/twice").json()["text"] == "second words"


def test_metrics_and_bundles_show_log_positions(client):
    client.post("/documents", json={"documents": [{"id": "m1", "text": "metrics"}]}, headers=KEY)
    client.post(
        "/documents/delete", json={"ids": [client.app.state.hot_swap.live.bundle.doc_ids[0]]}, headers=KEY
    )
    mutations = client.get("/bundles").json()["mutations"]
    assert mutations["log_seq"] == 2 and mutations["applied_seq"] == 2 and mutations["bundle_seq"] == 0
    assert mutations["delta_docs"] == 1 and mutations["tombstones"] == 1
    assert mutations["compaction_suggested"] is False
    assert [r["applied_seq"] for r in mutations["replicas"]] == [2]
    text = client.get("/metrics").text
    assert "search_mutation_log_seq 2.0" in text
    assert "search_mutation_delta_docs 1.0" in text
    assert "search_compaction_suggested 0.0" in text


def test_compaction_is_suggested_past_the_threshold(tmp_path, staged):
    bundles = tmp_path / "bundles"
    publish(staged["B"], bundles)
    with TestClient(create_app(make_settings(bundles, compaction_threshold=2))) as c:
        docs = [{"id": f"c{i}", "text": f"compaction {i}"} for i in range(2)]
        assert c.post("/documents", json={"documents": docs}, headers=KEY).status_code == 200
        mutations = c.get("/bundles").json()["mutations"]
        assert mutations["compaction_suggested"] is True
        assert "reindex" in mutations["compaction_reason"]
        assert "search_compaction_suggested 1.0" in c.get("/metrics").text


def test_an_unwritable_log_refuses_writes_and_keeps_serving(client, tmp_path):
    bundles = client.app.state.hot_swap.settings.bundles_dir
    log = bundles / "mutations.sqlite"
    log.write_bytes(b"this is not a database" * 100)  # a corrupt file where the log should be
    client.app.state.hot_swap.mutations.log.close()  # this thread's connection would cache the old file
    r = client.post("/documents", json={"documents": [{"id": "x", "text": "refused"}]}, headers=KEY)
    assert r.status_code == 503 and r.json()["error"]["code"] == "mutation_log", r.text
    assert "mutations.sqlite" in r.json()["error"]["message"]
    listing = client.get("/bundles")
    assert listing.status_code == 200 and "mutations.sqlite" in listing.json()["mutations"]["error"]
    assert len(search(client, query="vitamin d", top_k=3)) == 3  # search goes on from the bundle
    assert client.get("/documents/x").status_code == 404


# -- issue 27, item 9 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("doc_id", [".", "..", "a/../b", "./x", "x/."])
def test_dot_segment_ids_are_refused_at_write_time(client, doc_id):
    """An id `.` or `..` could be written but never read or deleted by path (URLs normalise dot segments)."""
    r = client.post("/documents", json={"documents": [{"id": doc_id, "text": "t"}]}, headers=KEY)
    assert r.status_code == 422 and "documents.0.id" in r.text, r.text
    r = client.post("/documents/delete", json={"ids": [doc_id]}, headers=KEY)
    assert r.status_code == 422, r.text


def test_one_rule_for_several_or_empty_key_headers(client):
    """Empty key headers count as not sent; every key sent must be the right one, in any order."""
    body = {"documents": [{"id": "k1", "text": "key rules"}]}
    right, wrong = KEY["X-API-Key"], "nope"
    cases = [
        ([("X-API-Key", ""), ("Authorization", f"Bearer {right}")], 200),
        ([("X-API-Key", right), ("X-API-Key", wrong)], 403),
        ([("X-API-Key", wrong), ("X-API-Key", right)], 403),
        ([("X-API-Key", right), ("Authorization", f"Bearer {wrong}")], 403),
        ([("X-API-Key", right), ("X-API-Key", right)], 200),
        ([("X-API-Key", ""), ("Authorization", "Bearer ")], 401),
    ]
    for headers, status in cases:
        r = client.post("/documents", json=body, headers=headers)
        assert r.status_code == status, (headers, r.text)
