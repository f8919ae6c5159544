"""Collections on the Milvus backend (a real milvus-lite server on loopback): a collection's versions are
Milvus collections named after it, our aliases are Milvus aliases, deleting drops them."""

from __future__ import annotations

import os
import shutil

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.bundles.collections import Collections, collection_milvus_name
from contract.index.backend import MILVUS_EXTRAS, BackendConfig
from contract.milvus.index import connect
from contract.milvus.pointer import MilvusPointer
from tests.app.bundles.test_backends import stage
from tests.app.conftest import make_settings

KEY = {"X-API-Key": "test-key"}


@pytest.fixture(scope="module")
def milvus(milvus_uri):
    return milvus_uri


def test_collection_names_and_aliases_in_milvus(milvus, tmp_path, shared_encoder, slice_data, doc_embeddings):
    from training.bundle.store import BundleStore

    bundles = tmp_path / "bundles"
    collections = Collections(None, bundles)
    folder = collections.create("docs")
    config = BackendConfig("milvus", milvus, None, collection_milvus_name("coltest", "docs"))
    staged = stage(shared_encoder, slice_data.corpus, doc_embeddings, tmp_path / "A", 0.6, config)
    copy = folder / ".copy-A"
    shutil.copytree(staged, copy, copy_function=os.link)
    version = BundleStore(folder, pointer=MilvusPointer(config)).publish(copy, force=True).version
    manifest = (folder / version / "manifest.json").read_text()
    settings = make_settings(bundles, index_backend="milvus", milvus_uri=milvus, milvus_name="coltest")
    client_m = connect(config)
    with TestClient(create_app(settings)) as client:
        r = client.post("/collections/docs/search", json={"query": "vitamin d", "top_k": 3})
        assert r.status_code == 200 and r.json()["version"] == version, r.text
        from contract.bundles.bundle import read_manifest

        extras = read_manifest(folder / version).extras[MILVUS_EXTRAS]
        assert extras["collection"].startswith("coltest_docs_v") and extras["alias"] == "coltest_docs_live"
        assert client_m.describe_alias("coltest_docs_live")["collection_name"] == extras["collection"]
        # our alias is a Milvus alias on the same collection
        assert client.put("/aliases/prod", json={"collection": "docs"}, headers=KEY).status_code == 200
        assert client_m.describe_alias("coltest_prod_live")["collection_name"] == extras["collection"]
        assert client.delete("/aliases/prod", headers=KEY).status_code == 200
        assert "coltest_prod_live" not in client_m.list_aliases().get("aliases", [])
        # deleting the collection drops its Milvus collection and live alias
        assert client.delete("/collections/docs", headers=KEY).status_code == 200
        assert not client_m.has_collection(extras["collection"])
        assert "coltest_docs_live" not in client_m.list_aliases().get("aliases", [])
    assert version in manifest
