"""Gate decisions that never claim liveness, gating only on one evaluation set, orphan build locks,
gate-log rotation (issue 11, items 9 and 10). Real bundles, real FAISS."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from contract.bundles.bundle import MANIFEST_FILE, read_manifest
from tests.training.publish.test_bundle import staged, variant  # noqa: F401 - `staged` is a fixture
from training.bundle.store import BundleStore, evaluation_fingerprint
from training.data.retrieval_data import Document, RetrievalData


def _with_fingerprint(folder: Path, fingerprint: str) -> Path:
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    manifest["extras"] = {**manifest.get("extras", {}), "eval_fingerprint": fingerprint}
    (folder / MANIFEST_FILE).unlink()  # hard-linked copy: break the link before writing
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    return folder


def test_a_crash_between_log_and_current_leaves_no_record_claiming_live(staged, tmp_path):  # noqa: F811
    store = BundleStore(tmp_path / "store")
    old = store.publish(variant(staged, tmp_path / "old", 0.5)).version

    def crash(step: str) -> None:
        if step == "current":
            raise RuntimeError("kill -9 between log and current")

    with pytest.raises(RuntimeError):
        store.publish(variant(staged, tmp_path / "new", 0.9), hook=crash)
    new = [v for v in store.list_versions() if v.version != old][0]

    def records() -> list[dict]:
        return [json.loads(line) for line in (store.root / "gate.jsonl").read_text().splitlines()]

    # the decision is logged after CURRENT (issue 27): nothing in the log speaks of the new version yet
    assert all(r["version"] != new.version for r in records())
    assert new.gate is not None and new.gate.accepted and not new.live  # live comes from CURRENT
    assert store.current_version() == old
    store.prune()  # the next publish or prune says what the killed publisher left
    (interrupted,) = [r for r in records() if r["version"] == new.version]
    assert interrupted["event"] == "publish_interrupted" and interrupted["made_live"] is False
    assert interrupted["accepted"] is True and "not live" in interrupted["reason"]


def test_the_gate_compares_only_on_the_same_evaluation_set(staged, tmp_path):  # noqa: F811
    store = BundleStore(tmp_path / "store")
    store.publish(_with_fingerprint(variant(staged, tmp_path / "a", 0.80), "set-one"))
    other = store.publish(_with_fingerprint(variant(staged, tmp_path / "b", 0.90), "set-two"))
    assert not other.live and "cannot compare" in other.reason and "force" in other.reason
    same = store.publish(_with_fingerprint(variant(staged, tmp_path / "c", 0.90), "set-one"))
    assert same.live and "0.9000 vs live 0.8000" in same.reason
    unknown = store.publish(variant(staged, tmp_path / "d", 0.95))  # no fingerprint: cannot tell
    assert not unknown.live and "cannot compare" in unknown.reason
    forced = store.publish(_with_fingerprint(variant(staged, tmp_path / "e", 0.1), "set-two"), force=True)
    assert forced.live and forced.reason.startswith("forced: cannot compare")
    decision = {v.version: v.gate for v in store.list_versions()}[other.version]
    assert decision is not None
    assert (decision.eval_fingerprint, decision.live_eval_fingerprint) == ("set-two", "set-one")


def test_the_fingerprint_covers_documents_queries_and_judgements():
    doc = Document(id="d", title="t", text="x", metadata={})
    base = RetrievalData(corpus={"d": doc}, queries={"q": "?"}, qrels={"q": {"d": 1}}, source="a")
    same = RetrievalData(corpus={"d": doc}, queries={"q": "?"}, qrels={"q": {"d": 1}}, source="elsewhere")
    assert evaluation_fingerprint(base) == evaluation_fingerprint(same)  # the folder's name does not count
    changed = [
        RetrievalData(
            corpus={"d": Document("d", "t", "y", {})}, queries=base.queries, qrels=base.qrels, source=""
        ),
        RetrievalData(corpus=base.corpus, queries={"q": "!"}, qrels=base.qrels, source=""),
        RetrievalData(corpus=base.corpus, queries=base.queries, qrels={"q": {"d": 2}}, source=""),
    ]
    assert len({evaluation_fingerprint(d) for d in [base, *changed]}) == 4


def test_orphaned_build_locks_are_removed_but_fresh_ones_kept(staged, tmp_path):  # noqa: F811
    store = BundleStore(tmp_path / "store")
    orphan = store.root / ".build-dead1234.lock"
    orphan.write_text("")
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))
    fresh = store.root / ".build-just5678.lock"  # a builder between creating and locking it
    fresh.write_text("")
    store.publish(variant(staged, tmp_path / "a", 0.5))
    assert not orphan.exists() and fresh.exists()


def test_the_gate_log_rotates(staged, tmp_path):  # noqa: F811
    store = BundleStore(tmp_path / "store", keep=10, gate_log_max_bytes=600)
    for i in range(4):
        store.publish(variant(staged, tmp_path / f"v{i}", 0.5))
    log, rotated = store.root / "gate.jsonl", store.root / "gate.jsonl.1"
    assert rotated.is_file() and log.stat().st_size < 600 + 1000
    versions = [json.loads(line)["version"] for f in (rotated, log) for line in f.read_text().splitlines()]
    assert versions[-1] == read_manifest(store.root / store.current_version()).version
