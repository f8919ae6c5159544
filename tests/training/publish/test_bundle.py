"""Bundles with the real encoder and FAISS: build, load-time validation, publish, gate, rollback, prune."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from contract.bundles.bundle import (
    IDS_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    Manifest,
    load_bundle,
    new_version_id,
    read_manifest,
    sha256_file,
)
from contract.errors import BundleInvalid, BundleNotFound, NoLiveBundle
from training.bundle.build import BuildOptions, BundleRecord, build_bundle
from training.bundle.store import PUBLISH_STEPS, BundleStore
from training.data.retrieval_data import Document

REPO = Path(__file__).resolve().parents[3]
TOPICS = ["protein folding", "black holes", "sourdough bread", "volcanoes", "chess openings", "tax law"]
CORPUS = {
    f"doc{i}": Document(
        id=f"doc{i}",
        title=f"On {TOPICS[i % len(TOPICS)]}",
        text=f"Note {i} about {TOPICS[i % len(TOPICS)]} and related matters.",
        metadata={"topic": TOPICS[i % len(TOPICS)], "n": i},
    )
    for i in range(30)
}


@pytest.fixture(scope="module")
def staged(shared_encoder, tmp_path_factory) -> Path:
    """One real bundle (encoder saved, flat index, docs, report-less), built once per module."""
    root = tmp_path_factory.mktemp("staged")
    return build_bundle(
        shared_encoder,
        CORPUS,
        staging_dir=root / "bundle",
        record=BundleRecord(metrics={"test": {"ndcg@10": 0.5}}, training_config={"loss": "infonce"}),
        build=BuildOptions(show_progress=False),
    )


def variant(staged: Path, dest: Path, ndcg: float | None, *, link: bool = True) -> Path:
    """A copy of `staged` with a fresh version id and other test metrics (hard links: cheap, unmodified)."""
    shutil.copytree(staged, dest, copy_function=os.link if link else shutil.copy2)
    manifest = json.loads((dest / MANIFEST_FILE).read_text())
    manifest["version"] = new_version_id()
    manifest["metrics"] = {"test": {"ndcg@10": ndcg}} if ndcg is not None else {}
    (dest / MANIFEST_FILE).unlink()  # break the hard link before writing
    (dest / MANIFEST_FILE).write_text(json.dumps(manifest))
    return dest


def test_built_bundle_loads_and_finds_its_documents(staged):
    bundle = load_bundle(staged)
    m = bundle.manifest
    assert m.n_vectors == 30 and m.dim == 384 and m.metric.index == "ip" and m.metric.similarity == "cosine"
    assert m.index.kind == "flat" and set(m.files) >= {
        INDEX_FILE,
        IDS_FILE,
        "docs.sqlite",
        "model/similarity.json",
    }
    assert all(sha256_file(staged / rel) == digest for rel, digest in m.files.items())
    assert m.code_version.package
    q = bundle.encoder.encode(["how do black holes form"], kind="query")
    ((pos, scores),) = bundle.index.search(bundle.encoder.to_index_space(q), 5)
    hits = bundle.docstore.get(pos, include=("title", "metadata"))
    assert all(h["metadata"]["topic"] == "black holes" for h in hits[:3])
    assert [bundle.doc_ids[p] for p in pos] == [h["id"] for h in hits]
    allowed = bundle.docstore.filter_positions({"topic": "volcanoes"})
    ((pos, _),) = bundle.index.search(bundle.encoder.to_index_space(q), 3, allowed=allowed)
    assert {bundle.doc_ids[p] for p in pos} <= {f"doc{i}" for i in range(3, 30, 6)}
    assert bundle.report is None


def _corrupt_index(b: Path) -> None:
    data = bytearray((b / INDEX_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (b / INDEX_FILE).write_bytes(bytes(data))


def _truncate_manifest(b: Path) -> None:
    text = (b / MANIFEST_FILE).read_text()
    (b / MANIFEST_FILE).write_text(text[: len(text) // 2])


def _edit_manifest(b: Path, **changes) -> None:
    m = json.loads((b / MANIFEST_FILE).read_text())
    for key, value in changes.items():
        target = m
        *path, last = key.split("__")
        for p in path:
            target = target[p]
        target[last] = value
    (b / MANIFEST_FILE).write_text(json.dumps(m))


def _drop_id(b: Path) -> None:
    ids = json.loads((b / IDS_FILE).read_text())[:-1]
    (b / IDS_FILE).write_text(json.dumps(ids))
    m = json.loads((b / MANIFEST_FILE).read_text())
    m["files"][IDS_FILE] = sha256_file(b / IDS_FILE)  # consistent checksum: the count check must catch it
    (b / MANIFEST_FILE).write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_corrupt_index, "index.faiss: checksum mismatch"),
        (_truncate_manifest, "invalid manifest"),
        (lambda b: (b / IDS_FILE).unlink(), "ids.json: missing"),
        (lambda b: _edit_manifest(b, dim=385), "index dim 384 != manifest dim 385"),
        (lambda b: _edit_manifest(b, metric__index="cos"), "invalid manifest"),
        (lambda b: _edit_manifest(b, metric__similarity="aninfonce"), "similarity"),
        (lambda b: _edit_manifest(b, version="latest"), "YYYYMMDD"),
        (_drop_id, "29 ids, manifest says 30"),
        (lambda b: (b / "model" / "similarity.json").write_text("{}"), "model/similarity.json: checksum"),
    ],
)
def test_corrupt_partial_or_mismatched_bundle_is_refused(staged, tmp_path, damage, message):
    b = variant(staged, tmp_path / "b", 0.5, link=False)
    damage(b)
    with pytest.raises(BundleInvalid, match=message):
        load_bundle(b)
    store = BundleStore(tmp_path / "store")
    with pytest.raises(BundleInvalid):
        store.publish(b)
    assert store.current_version() is None and store.list_versions() == []


def test_gate_accepts_rejects_and_forces(staged, tmp_path):
    store = BundleStore(tmp_path / "store", keep=10)
    first = store.publish(variant(staged, tmp_path / "a", 0.50))
    assert first.live and "first bundle" in first.reason
    better = store.publish(variant(staged, tmp_path / "b", 0.52))
    assert better.live and store.current_version() == better.version
    within = store.publish(variant(staged, tmp_path / "c", 0.517))  # 0.003 worse: inside tolerance
    assert within.live
    worse = store.publish(variant(staged, tmp_path / "d", 0.40))
    assert not worse.live and "kept as candidate" in worse.reason and "0.4000" in worse.reason
    assert store.current_version() == within.version
    missing = store.publish(variant(staged, tmp_path / "e", None))
    assert not missing.live and "has no test ndcg@10" in missing.reason
    forced = store.publish(variant(staged, tmp_path / "f", 0.30), force=True)
    assert forced.live and forced.reason.startswith("forced:") and store.current_version() == forced.version
    listed = {v.version: v for v in store.list_versions()}
    assert list(listed) == sorted(listed)  # version ids sort by time
    assert not listed[worse.version].live and listed[worse.version].gate.reason == worse.reason
    assert [v.version for v in store.list_versions() if v.live] == [forced.version]
    log = [json.loads(line) for line in (store.root / "gate.jsonl").read_text().splitlines()]
    assert [r["accepted"] for r in log] == [True, True, True, False, False, True]
    assert all("live" not in r for r in log)  # live is what CURRENT says, never a logged claim
    assert store.load_current().version == forced.version


@pytest.mark.parametrize("failing_step", PUBLISH_STEPS)
def test_publish_is_atomic_under_a_crash_before_any_step(staged, tmp_path, failing_step):
    store = BundleStore(tmp_path / "store")
    old = store.publish(variant(staged, tmp_path / "old", 0.5)).version

    def crash(step: str) -> None:
        if step == failing_step:
            raise RuntimeError(f"injected crash before {step}")

    candidate = variant(staged, tmp_path / "new", 0.9)
    new_version = read_manifest(candidate).version
    with pytest.raises(RuntimeError, match="injected"):
        store.publish(candidate, hook=crash)
    # CURRENT moves at the "current" step only; the decision is logged after it (issue 27, item 7)
    moved = PUBLISH_STEPS.index(failing_step) > PUBLISH_STEPS.index("current")
    assert store.current_version() == (new_version if moved else old)
    assert store.load_current().version == (new_version if moved else old)
    visible = [v.version for v in store.list_versions()]
    assert visible in ([old], [old, new_version])  # the new one only if the rename completed
    for version in visible:
        load_bundle(store.root / version)  # whatever is visible is complete and valid
    later = store.publish(variant(staged, tmp_path / "later", 0.9))
    assert later.live and store.current_version() == later.version
    assert not [p for p in store.root.iterdir() if p.name.startswith((".staging-", ".publishing-"))]
    log = [json.loads(line) for line in (store.root / "gate.jsonl").read_text().splitlines()]
    story = [r["event"] for r in log if r["version"] == new_version]
    interrupted = failing_step in ("current", "log")  # renamed into place, decision not yet logged
    assert story == (["publish_interrupted"] if interrupted else [])


def test_rollback_and_refusal_to_activate_a_corrupt_version(staged, tmp_path):
    store = BundleStore(tmp_path / "store")
    with pytest.raises(NoLiveBundle):
        store.load_current()
    v1 = store.publish(variant(staged, tmp_path / "a", 0.5)).version
    v2 = store.publish(variant(staged, tmp_path / "b", 0.6)).version
    store.activate(v1)
    assert store.current_version() == v1 and store.load_current().version == v1
    store.activate(v2)
    assert store.current_version() == v2
    with pytest.raises(BundleNotFound):
        store.activate("20990101T000000.000000Z-abcdef")
    # a published version is never mutated by us; simulate disk damage on a copy-on-write-free clone
    damaged = store.root / v1 / INDEX_FILE
    data = damaged.read_bytes()
    damaged.unlink()
    damaged.write_bytes(data[:-10])
    with pytest.raises(BundleInvalid, match="checksum"):
        store.activate(v1)
    assert store.current_version() == v2


def test_prune_keeps_the_newest_and_the_live_one(staged, tmp_path):
    store = BundleStore(tmp_path / "store", keep=10)
    versions = [store.publish(variant(staged, tmp_path / f"v{i}", 0.5 + i / 100)).version for i in range(4)]
    store.activate(versions[0])
    deleted = store.prune(keep=1)
    assert deleted == versions[1:3]
    assert [v.version for v in store.list_versions()] == [versions[0], versions[3]]
    assert store.current_version() == versions[0]
    store.prune(keep=0)
    assert [v.version for v in store.list_versions()] == [versions[0]]


def test_publish_prunes_to_keep(staged, tmp_path):
    store = BundleStore(tmp_path / "store", keep=2)
    versions = [store.publish(variant(staged, tmp_path / f"v{i}", 0.5)).version for i in range(3)]
    assert [v.version for v in store.list_versions()] == versions[1:]


def test_concurrent_publishers_are_serialised(staged, tmp_path):
    store = BundleStore(tmp_path / "store", keep=10)
    staged_copies = [variant(staged, tmp_path / f"c{i}", 0.5) for i in range(3)]
    errors: list[BaseException] = []

    def run(path: Path) -> None:
        try:
            BundleStore(store.root, keep=10).publish(path)
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p,)) for p in staged_copies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    versions = [v.version for v in store.list_versions()]
    assert len(versions) == 3 and store.current_version() in versions
    assert len((store.root / "gate.jsonl").read_text().splitlines()) == 3


def test_publish_removes_a_killed_builders_folder_but_not_a_live_one(staged, tmp_path):
    store = BundleStore(tmp_path / "store")
    builder = (
        "import sys, time\n"
        "from training.bundle.store import BundleStore\n"
        "with BundleStore(sys.argv[1]).build_dir() as p:\n"
        "    (p / 'index.faiss').write_bytes(b'half written')\n"
        "    print(p, flush=True)\n"
        "    time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", builder, str(store.root)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        dead = Path(proc.stdout.readline().strip())  # type: ignore[union-attr]
        assert dead.is_dir() and dead.name.startswith(".build-")
    finally:
        proc.kill()  # SIGKILL: no finally block of the builder runs
        proc.wait()
    assert dead.is_dir()  # the crash left it behind
    with store.build_dir() as mine:
        (mine / "partial").write_text("still building")
        store.publish(variant(staged, tmp_path / "v", 0.5))
        assert not dead.exists() and not dead.with_name(dead.name + ".lock").exists()
        assert (mine / "partial").exists()  # a live builder's folder is left alone
    assert not mine.exists()
    assert [p.name for p in store.root.iterdir() if p.name.startswith(".build-")] == []


def test_manifest_schema_round_trip(staged):
    m = read_manifest(staged)
    again = Manifest.model_validate_json(m.model_dump_json())
    assert again == m
    assert np.isclose(again.metrics["test"]["ndcg@10"], 0.5)
