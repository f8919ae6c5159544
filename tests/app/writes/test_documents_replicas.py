"""Two real API processes (uvicorn on loopback) on one bundles folder: documents written on one are served
by both; kill -9 after the acknowledgement loses nothing; a reindex folds the log in without applying it
twice; a rollback keeps the writes made after the older bundle.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.app.conftest import publish, wait_until
from tests.conftest import REPO
from tests.servers import free_port

KEY = {"X-API-Key": "test-key"}


class Replica:
    """One `uvicorn --factory app.main:create_app` process, restartable on the same port."""

    def __init__(self, bundles: Path, log: Path):
        self.port = free_port()
        self.bundles, self.log_path = bundles, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        env = os.environ | {
            "SEARCH_BUNDLES_DIR": str(self.bundles),
            "SEARCH_API_KEY": "test-key",
            "SEARCH_RELOAD_POLL_SECONDS": "0.2",
            "SEARCH_ENCODER_BACKEND": "torch",
            "PYTHONPATH": str(REPO),
        }
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_until(
            self._ready, timeout=180, what=f"replica on {self.port} ready", interval=0.3, detail=self.tail
        )
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.tail()
        try:
            return httpx.get(self.url + "/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # -- API ----------------------------------------------------------------------------------------
    def post(self, path: str, body: dict) -> dict:
        r = httpx.post(self.url + path, json=body, headers=KEY, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    def ids(self, query: str, k: int = 10, **extra) -> list[str]:
        r = httpx.post(self.url + "/search", json={"query": query, "top_k": k} | extra, timeout=60)
        assert r.status_code == 200, r.text
        return [h["id"] for h in r.json()["results"][0]["hits"]]

    def has(self, doc_id: str) -> bool:
        return httpx.get(f"{self.url}/documents/{doc_id}", timeout=30).status_code == 200

    def mutations(self) -> dict:
        return httpx.get(self.url + "/bundles", timeout=30).json()["mutations"]

    def version(self) -> str:
        return httpx.get(self.url + "/bundles", timeout=30).json()["live"]


def _write_beir(data, folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as f:
        for doc in data.corpus.values():
            f.write(
                json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": doc.metadata})
                + "\n"
            )
    with open(folder / "queries.jsonl", "w") as f:
        for qid, text in data.queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, rels in data.qrels.items():
            for doc_id, rel in rels.items():
                f.write(f"{qid}\t{doc_id}\t{rel}\n")
    return folder


AXOLOTL = {
    "id": "axolotl",
    "title": "Axolotl regeneration",
    "text": "Axolotls regrow whole limbs, spinal cord and parts of the heart after injury.",
    "metadata": {"group": "zz"},
}
OCTOPUS = {
    "id": "octopus",
    "text": "Octopus arms contain most of the animal's neurons.",
    "metadata": {"group": "zz"},
}
TARDIGRADE = {
    "id": "tardigrade",
    "text": "Tardigrades survive the vacuum of space by drying out.",
    "metadata": {},
}


@pytest.mark.slow
def test_two_replicas_share_writes_survive_kill9_reindex_and_rollback(tmp_path, staged, slice_data):
    from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan
    from training.publish.index_model import index_model
    from training.train.run_hooks import RunHooks

    bundles = tmp_path / "bundles"
    first = publish(staged["B"], bundles)
    a = Replica(bundles, tmp_path / "a.log").start()
    b = Replica(bundles, tmp_path / "b.log").start()
    try:
        # upsert on A: A serves it when it answers, B within its poll interval; by text and by filter
        seq = a.post("/documents", {"documents": [AXOLOTL]})["seq"]
        assert a.ids("how do axolotls regrow limbs", 1) == ["axolotl"]
        assert a.ids("anything", 5, filter={"group": "zz"}) == ["axolotl"]
        wait_until(
            lambda: b.ids("how do axolotls regrow limbs", 1) == ["axolotl"], what="upsert visible on B"
        )
        assert b.ids("anything", 5, filter={"group": "zz"}) == ["axolotl"]
        assert b.mutations()["applied_seq"] >= seq

        # delete on B: never returned by either, and top-k stays full
        query = "vitamin d bone density"
        victims = b.ids(query, 3)
        b.post("/documents/delete", {"ids": victims})
        assert not set(b.ids(query, 10)) & set(victims) and len(b.ids(query, 10)) == 10
        wait_until(lambda: not set(a.ids(query, 10)) & set(victims), what="delete visible on A")
        assert len(a.ids(query, 10)) == 10

        # kill -9 right after the acknowledgement: the write is in the log, a restart replays it
        a.post("/documents", {"documents": [OCTOPUS]})
        a.kill9()
        a.start()
        assert a.ids("octopus neurons in arms", 1) == ["octopus"]
        assert a.ids("how do axolotls regrow limbs", 1) == ["axolotl"]
        assert not set(a.ids(query, 10)) & set(victims)
        wait_until(lambda: b.has("octopus"), what="octopus on B")

        # a reindex folds the log (up to its head) into the new bundle; a write during the build is replayed
        data_dir = _write_beir(slice_data, tmp_path / "data")
        folded_seq = a.mutations()["log_seq"]

        def write_during_build() -> None:
            if any(bundles.glob(".build-*/manifest.json")) and not a.has("tardigrade"):
                a.post("/documents", {"documents": [TARDIGRADE]})

        result = index_model(
            bundles / first / "model",
            PublishPlan(
                data=DataPlan(data_dir=str(data_dir)),
                index=IndexPlan(kind="flat"),
                publication=PublicationPlan(bundles_dir=str(bundles), force=True, onnx=False, distill=False),
            ),
            RunHooks(show_progress=False, checkpoint=write_during_build),
        )
        assert result.live and a.has("tardigrade")
        for r in (a, b):
            wait_until(lambda r=r: r.version() == result.version, what="replicas follow the reindexed bundle")
            m = r.mutations()
            assert m["bundle_seq"] == folded_seq  # the log up to here is in the bundle itself
            assert m["applied_seq"] == folded_seq + 1 and m["delta_docs"] == 1 and m["tombstones"] == 0
            assert r.ids("how do axolotls regrow limbs", 1) == ["axolotl"]
            assert r.ids("tardigrades in space", 1) == ["tardigrade"]
            assert not set(r.ids(query, 10)) & set(victims)
            assert r.ids("octopus neurons", 300).count("octopus") == 1
        versions = {v["version"]: v["mutation_seq"] for v in httpx.get(a.url + "/bundles").json()["versions"]}
        assert versions == {first: 0, result.version: folded_seq}
        replicas = a.mutations()["replicas"]
        assert len([r for r in replicas if r["version"] == result.version]) == 2

        # rollback to the first bundle: it replays the whole log, so no acknowledged write disappears
        r = httpx.post(f"{a.url}/bundles/{first}/activate", headers=KEY, timeout=120)
        assert r.status_code == 200, r.text
        wait_until(lambda: b.version() == first, what="B follows the rollback")
        for r in (a, b):
            assert r.mutations()["bundle_seq"] == 0
            for doc in ("axolotl", "octopus", "tardigrade"):
                assert r.has(doc)
            assert not any(r.has(v) for v in victims)
            assert not set(r.ids(query, 10)) & set(victims)
    finally:
        a.stop()
        b.stop()
