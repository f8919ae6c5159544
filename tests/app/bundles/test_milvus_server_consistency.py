"""Read-your-writes and the version swap on the real Milvus standalone server (issue 46 item 2), whose
searches run at the collection's Bounded consistency (a search may not yet see rows acknowledged in the
last seconds; milvus-lite has no such lag).

Why a write is still found at once: document writes never go to Milvus. They land in the mutation log and
its overlay (contract/mutations/overlay.py) and are merged into every answer, dense, lexical and hybrid,
before the response; the collection holds only what a publish wrote and counted with a Strong count(*)
when it was opened (contract/milvus/index.py). The tests check both halves against the server.
"""

from __future__ import annotations

import itertools
import os
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.bundles.bundle import read_manifest
from contract.index.backend import MILVUS_EXTRAS, BackendConfig
from contract.milvus.index import alias_name, connect
from contract.milvus.pointer import MilvusPointer
from tests.app.bundles.test_backends import stage
from tests.app.conftest import check_a_write_in_every_mode, make_settings, wait_until
from tests.servers import serve_app

KEY = {"X-API-Key": "test-key"}
NAME = "consistencytest"


@pytest.fixture(scope="module")
def milvus(milvus_standalone_uri) -> BackendConfig:
    return BackendConfig(backend="milvus", milvus_uri=milvus_standalone_uri, milvus_name=NAME)


@pytest.fixture(scope="module")
def staged(tmp_path_factory, shared_encoder, slice_data, doc_embeddings, milvus) -> dict[str, Path]:
    """Two versions in the server's collections, each with a BM25 index (so lexical and hybrid answer)."""
    from training.hybrid.lexical_step import attach_lexical

    root = tmp_path_factory.mktemp("milvus-consistency")
    query_emb = shared_encoder.encode(list(slice_data.queries.values()), kind="query")
    out = {}
    for name, ndcg in (("A", 0.6), ("B", 0.7)):
        folder = stage(shared_encoder, slice_data.corpus, doc_embeddings, root / name, ndcg, milvus)
        attach_lexical(folder, shared_encoder, slice_data, doc_embeddings, query_emb, None)
        out[name] = folder
    return out


def publish(staged_dir: Path, bundles: Path, milvus: BackendConfig) -> str:
    from training.bundle.store import BundleStore

    bundles.mkdir(parents=True, exist_ok=True)
    copy = bundles / f".copy-{staged_dir.name}-{len(os.listdir(bundles))}"
    shutil.copytree(staged_dir, copy, copy_function=os.link)
    return BundleStore(bundles, pointer=MilvusPointer(milvus)).publish(copy, force=True).version


def settings(bundles: Path, milvus: BackendConfig, **overrides):
    return make_settings(
        bundles, index_backend="milvus", milvus_uri=milvus.milvus_uri, milvus_name=NAME, **overrides
    )


def _rows(milvus: BackendConfig, bundles: Path, version: str) -> int:
    collection = read_manifest(bundles / version).extras[MILVUS_EXTRAS]["collection"]
    found = connect(milvus).query(
        collection, filter="", output_fields=["count(*)"], consistency_level="Strong"
    )
    return int(found[0]["count(*)"])


def test_an_acknowledged_write_is_found_in_every_mode_at_once_on_the_server(staged, milvus, tmp_path):
    bundles = tmp_path / "bundles"
    version = publish(staged["A"], bundles, milvus)
    rows = _rows(milvus, bundles, version)
    with TestClient(create_app(settings(bundles, milvus, reload_poll_seconds=0))) as client:
        check_a_write_in_every_mode(client, KEY, version)
    # the write never reached the collection: what the searches found came from the overlay
    assert _rows(milvus, bundles, version) == rows


def test_a_version_swap_under_load_fails_no_request(staged, milvus, tmp_path):
    """Four clients search in a loop over real HTTP while a new version is published into Milvus (its
    collection built and loaded, CURRENT written, the alias flipped) and then rolled back through the API:
    no request fails, and each client's answers move from the old version to the new one and back once,
    never flapping (a request uses one version end to end; the old collection stays loaded until pruned)."""
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles, milvus)
    stop = threading.Event()
    answers: list[list[tuple[int, str]]] = [[] for _ in range(4)]

    def load(url: str, out: list[tuple[int, str]]) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            while not stop.is_set():
                r = c.post("/search", json={"query": "zebra marmalade", "top_k": 5, "mode": "dense"})
                out.append((r.status_code, r.json()["version"] if r.status_code == 200 else r.text))

    def all_saw(version: str, after: list[int]) -> bool:
        return all(any(v == version for _, v in out[n:]) for out, n in zip(answers, after, strict=True))

    with serve_app(create_app(settings(bundles, milvus, reload_poll_seconds=0.1))) as url:
        threads = [threading.Thread(target=load, args=(url, out), daemon=True) for out in answers]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: all(len(out) >= 3 for out in answers), timeout=60, what="load running")
            b = publish(staged["B"], bundles, milvus)
            marks = [len(out) for out in answers]
            wait_until(lambda: all_saw(b, marks), timeout=60, what=f"every client answered by {b}")
            assert connect(milvus).describe_alias(alias_name(NAME))["collection_name"] == _collection(
                bundles, b
            )
            r = httpx.post(f"{url}/bundles/{a}/activate", headers=KEY, timeout=60)
            assert r.status_code == 200, r.text
            marks = [len(out) for out in answers]
            wait_until(lambda: all_saw(a, marks), timeout=60, what=f"every client answered by {a} again")
            time.sleep(0.5)  # a few answers more after the rollback settled
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
    assert connect(milvus).describe_alias(alias_name(NAME))["collection_name"] == _collection(bundles, a)
    failed = [x for out in answers for x in out if x[0] != 200]
    assert failed == [], failed[:3]
    for out in answers:
        runs = [v for v, _ in itertools.groupby(v for _, v in out)]
        assert runs == [a, b, a], runs
    assert sum(len(out) for out in answers) >= 20  # it was load, not a handful of requests


def _collection(bundles: Path, version: str) -> str:
    return str(read_manifest(bundles / version).extras[MILVUS_EXTRAS]["collection"])
