"""The API suite over both index backends: FAISS in process, and Milvus (a real milvus-lite server on
loopback, one per module). Same bundles, same oracle: search, batch, filters, hot swap, rollback,
readiness; then what only Milvus has: the live alias, bad configuration, expression injection."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.index.backend import MILVUS_EXTRAS, BackendConfig
from contract.milvus.index import alias_name, connect
from contract.milvus.pointer import MilvusPointer
from tests.app.conftest import make_settings, wait_until
from tests.conftest import milvus_endpoint
from tests.servers import free_port


def milvus_config(request, kind: str) -> BackendConfig:
    return BackendConfig(backend="milvus", milvus_uri=milvus_endpoint(request, kind), milvus_name="apitest")


def stage(encoder, corpus, doc_emb, folder: Path, ndcg: float, milvus: BackendConfig | None) -> Path:
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, BundleRecord, build_bundle
    from training.export.milvus_build import milvus_builder

    builder = None
    if milvus is not None:
        builder = milvus_builder(milvus, corpus, metric=encoder.index_metric, index_kind="flat")
    return build_bundle(
        encoder,
        corpus,
        staging_dir=folder,
        doc_embeddings=doc_emb,
        record=BundleRecord(metrics={"test": {"ndcg@10": ndcg}}),
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False, index_builder=builder),
    )


@dataclass
class Env:
    backend: str
    bundles: Path
    staged: dict[str, Path]
    milvus: BackendConfig | None

    def settings(self, **overrides):
        extra = {}
        if self.milvus is not None:
            extra = dict(index_backend="milvus", milvus_uri=self.milvus.milvus_uri, milvus_name="apitest")
        return make_settings(self.bundles, **(extra | overrides))

    def publish(self, name: str, force: bool = True) -> str:
        from training.bundle.store import BundleStore

        copy = self.bundles / f".copy-{name}-{len(os.listdir(self.bundles))}"
        shutil.copytree(self.staged[name], copy, copy_function=os.link)
        pointer = MilvusPointer(self.milvus) if self.milvus is not None else None
        return BundleStore(self.bundles, pointer=pointer).publish(copy, force=force).version


@pytest.fixture(scope="module", params=["faiss", "milvus-lite", "milvus-server"])
def env(request, tmp_path_factory, shared_encoder, slice_data, doc_embeddings) -> Env:
    kind = request.param.removeprefix("milvus-")
    config = milvus_config(request, kind) if request.param.startswith("milvus") else None
    root = tmp_path_factory.mktemp(f"backend-{request.param}")
    staged = {
        name: stage(shared_encoder, slice_data.corpus, doc_embeddings, root / name, ndcg, config)
        for name, ndcg in (("A", 0.6), ("B", 0.1))
    }
    bundles = root / "bundles"
    bundles.mkdir()
    env = Env(request.param, bundles, staged, config)
    env.publish("A")
    return env


# what only Milvus has: these tests take the module's Milvus environment alone (not collected for FAISS)
MILVUS_ONLY = pytest.mark.parametrize("env", ["milvus-lite", "milvus-server"], indirect=True)


@pytest.fixture(scope="module")
def client(env):
    with TestClient(create_app(env.settings(microbatch_enabled=True))) as c:
        yield c


@pytest.fixture(scope="module")
def oracle(slice_data, doc_embeddings):
    ids = list(slice_data.corpus)

    def top(q: np.ndarray, k: int, allowed: set[str] | None = None) -> list[tuple[str, float]]:
        scores = doc_embeddings @ q  # (n_docs,)
        order = np.lexsort((np.arange(len(ids)), -scores))
        return [(ids[i], float(scores[i])) for i in order if allowed is None or ids[i] in allowed][:k]

    return top


def _matches(hits: list[dict], expected: list[tuple[str, float]]) -> None:
    assert [h["id"] for h in hits] == [e[0] for e in expected]
    np.testing.assert_allclose([h["score"] for h in hits], [e[1] for e in expected], atol=1e-5)


def _current_version(env: Env) -> str:
    return (env.bundles / "CURRENT").read_text().strip()


def test_search_and_batch_match_exact_search(client, env, shared_encoder, slice_data, oracle):
    queries = list(slice_data.queries.values())[:6]
    r = client.post("/search", json={"queries": queries, "top_k": 10})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metric"] == "cosine" and body["version"] == _current_version(env)
    for res, q in zip(body["results"], shared_encoder.encode(queries, kind="query"), strict=True):
        _matches(res["hits"], oracle(q, 10))
    v = shared_encoder.encode([queries[0]], kind="query")[0]
    r = client.post("/search", json={"vector": v.tolist(), "top_k": 5})
    _matches(r.json()["results"][0]["hits"], oracle(v, 5))


def test_filters_eq_in_range(client, shared_encoder, slice_data, oracle):
    query = list(slice_data.queries.values())[1]
    q = shared_encoder.encode([query], kind="query")[0]
    docs = slice_data.corpus
    cases = [
        ({"group": "b"}, {d for d, doc in docs.items() if doc.metadata["group"] == "b"}),
        ({"group": ["a", "c"]}, {d for d, doc in docs.items() if doc.metadata["group"] in ("a", "c")}),
        (
            {"year": {"gte": 2005, "lt": 2010}},
            {d for d, x in docs.items() if 2005 <= x.metadata["year"] < 2010},
        ),
        (
            {"even": True, "group": {"in": ["a"]}},
            {d for d, x in docs.items() if x.metadata["even"] and x.metadata["group"] == "a"},
        ),
        ({"year": "2005"}, set()),  # a string never equals a number, on either backend
        ({"missing.nested": 1}, set()),
    ]
    for flt, allowed in cases:
        r = client.post("/search", json={"query": query, "top_k": 8, "filter": flt, "include": ["metadata"]})
        assert r.status_code == 200, (flt, r.text)
        _matches(r.json()["results"][0]["hits"], oracle(q, 8, allowed))


def test_injection_through_filter_values_and_names(client, slice_data):
    query = list(slice_data.queries.values())[0]
    for value in ['b" or pos >= 0 or m_group == "', "b' or true or '", 'b\\" or true or \\"', "b\\"]:
        r = client.post("/search", json={"query": query, "top_k": 5, "filter": {"group": value}})
        assert r.status_code == 200, (value, r.text)
        assert r.json()["results"][0]["hits"] == [], value  # matched literally: no document has that group
    for name in ['group" or true or "x', "group == 'a' or pos", "group)or(true"]:
        r = client.post("/search", json={"query": query, "top_k": 5, "filter": {name: "a"}})
        assert r.status_code == 422, (name, r.text)
        assert r.json()["error"]["code"] == "invalid_request"


def test_hot_swap_then_rollback(client, env):
    a = _current_version(env)
    b = env.publish("B")
    wait_until(
        lambda: client.post("/search", json={"query": "x", "top_k": 1}).json()["version"] == b, what="swap"
    )
    if env.milvus is not None:
        c = connect(env.milvus)
        assert c.describe_alias(alias_name("apitest"))["collection_name"].endswith(
            b.replace(".", "_").replace("-", "_")
        )
    r = client.post(f"/bundles/{a}/activate", headers={"X-API-Key": "test-key"})
    assert r.status_code == 200, r.text
    assert client.post("/search", json={"query": "x", "top_k": 1}).json()["version"] == a
    assert _current_version(env) == a
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    if env.milvus is not None:  # the rollback flipped the alias back
        manifest = (env.bundles / a / "manifest.json").read_text()
        assert connect(env.milvus).describe_alias(alias_name("apitest"))["collection_name"] in manifest


@MILVUS_ONLY
def test_readiness_repoints_an_alias_that_lags_current(client, env):
    """A publisher killed between writing CURRENT and flipping the alias leaves it on another collection
    (or none): /readyz of the replica serving CURRENT's version flips it back (the flip is idempotent).
    A replica still on an older version reports the mismatch instead (training/test_milvus_publish.py)."""
    assert env.milvus is not None
    from contract.bundles.bundle import read_manifest

    c = connect(env.milvus)
    live = read_manifest(env.bundles / _current_version(env)).extras[MILVUS_EXTRAS]["collection"]
    others = [n for n in c.list_collections() if n != live and n.startswith("apitest_v")]
    c.alter_alias(others[0], alias_name("apitest"))
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    assert c.describe_alias(alias_name("apitest"))["collection_name"] == live
    c.drop_alias(alias_name("apitest"))
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    assert c.describe_alias(alias_name("apitest"))["collection_name"] == live


@MILVUS_ONLY
def test_unreachable_milvus_is_a_clear_503_not_a_500(env, tmp_path):
    assert env.milvus is not None
    settings = env.settings(
        milvus_uri=f"http://127.0.0.1:{free_port()}", milvus_timeout_s=2, reload_poll_seconds=0
    )
    with TestClient(create_app(settings)) as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and "unreachable" in r.json()["error"]["message"], r.text
        s = c.post("/search", json={"query": "x", "top_k": 1})
        assert s.status_code == 503 and "unreachable" in s.json()["error"]["message"], s.text


@MILVUS_ONLY
def test_dimension_mismatch_and_missing_backend_are_clear(env, tmp_path):
    assert env.milvus is not None
    from pymilvus import DataType

    from contract.bundles.bundle import MANIFEST_FILE, read_manifest

    c = connect(env.milvus)
    schema = c.create_schema(auto_id=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("pos", DataType.INT64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=8)
    c.create_collection("apitest_wrongdim", schema=schema)
    bundles = tmp_path / "bundles"
    version = _current_version(env)
    shutil.copytree(env.bundles / version, bundles / version, copy_function=os.link)
    manifest = read_manifest(bundles / version)
    manifest.extras[MILVUS_EXTRAS]["collection"] = "apitest_wrongdim"
    (bundles / version / MANIFEST_FILE).unlink()
    (bundles / version / MANIFEST_FILE).write_text(manifest.model_dump_json())
    (bundles / "CURRENT").write_text(version + "\n")
    with TestClient(create_app(make_settings(bundles, **_milvus(env), reload_poll_seconds=0))) as app:
        r = app.get("/readyz")
        assert r.status_code == 503 and "dimension mismatch" in r.json()["error"]["message"], r.text
        assert app.post("/search", json={"query": "x", "top_k": 1}).status_code == 503
    # a Milvus bundle served with the FAISS backend says what to set
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as app:
        r = app.get("/readyz")
        assert r.status_code == 503 and "SEARCH_INDEX_BACKEND=milvus" in r.json()["error"]["message"], r.text
    c.drop_collection("apitest_wrongdim")


def _milvus(env: Env) -> dict:
    return dict(index_backend="milvus", milvus_uri=env.milvus.milvus_uri, milvus_name="apitest")


def test_document_writes_on_either_backend(client, env, shared_encoder, slice_data, oracle):
    """Upserts and deletes (contract/mutations/overlay.py) over either backend: Milvus knows no tombstones, so the
    overlay asks it for k + |tombstones| and drops them; a query still gets a full top k."""
    key = {"X-API-Key": "test-key"}
    query = list(slice_data.queries.values())[1]
    q = shared_encoder.encode([query], kind="query")[0]
    before = client.post("/search", json={"vector": q.tolist(), "top_k": 5}).json()["results"][0]["hits"]
    gone = before[0]["id"]
    r = client.delete(f"/documents/{gone}", headers=key)
    assert r.status_code == 200, r.text
    r = client.post(
        "/documents",
        headers=key,
        json={"documents": [{"id": "new-doc", "text": query, "metadata": {"kind": "written"}}]},
    )
    assert r.status_code == 200, r.text
    hits = client.post("/search", json={"vector": q.tolist(), "top_k": 5}).json()["results"][0]["hits"]
    ids = [h["id"] for h in hits]
    assert gone not in ids and len(ids) == 5
    assert "new-doc" in ids  # its text is the query itself
    filtered = client.post(
        "/search", json={"vector": q.tolist(), "top_k": 3, "filter": {"kind": "written"}}
    ).json()["results"][0]["hits"]
    assert [h["id"] for h in filtered] == ["new-doc"]
    rest = [h["id"] for h in hits if h["id"] != "new-doc"]
    expected = [i for i, _ in oracle(q, 6) if i != gone]
    assert rest == expected[: len(rest)]
