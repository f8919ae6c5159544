"""`python -m training bundles list|activate|prune|verify` on a real bundles folder, as an operator runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contract.jobs.plan import IndexPlan
from training.bundle.build import BuildOptions, BundleRecord
from training.data.retrieval_data import Document

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "training", "bundles", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory, _base_encoder):
    from training.bundle.build import build_bundle
    from training.bundle.store import BundleStore

    root = tmp_path_factory.mktemp("bundles-cli")
    corpus = {f"d{i}": Document(f"d{i}", f"title {i}", f"text number {i} about cells", {}) for i in range(6)}
    emb = _base_encoder.encode([d.text for d in corpus.values()])
    store = BundleStore(root / "bundles")
    versions = []
    for n, ndcg in enumerate((0.5, 0.4)):  # the second is worse: kept as a candidate
        staged = build_bundle(
            _base_encoder,
            corpus,
            staging_dir=root / f"stage{n}",
            doc_embeddings=emb,
            record=BundleRecord(metrics={"test": {"ndcg@10": ndcg}}),
            build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
        )
        versions.append(store.publish(staged).version)
    return root / "bundles", versions


def test_list_activate_verify_prune(two_versions):
    bundles, (first, second) = two_versions
    listed = json.loads(_cli("list", "--bundles", str(bundles), "--json").stdout)
    assert [(v["version"], v["live"]) for v in listed["versions"]] == [(first, True), (second, False)]
    assert "kept as candidate" in listed["versions"][1]["gate"]["reason"]

    done = _cli("activate", second, "--bundles", str(bundles))
    assert done.returncode == 0 and done.stdout.strip() == f"{second} live (was {first})"
    assert (bundles / "CURRENT").read_text().strip() == second
    table = _cli("list", "--bundles", str(bundles)).stdout
    assert f"{second}  live" in table
    header, *rows = table.splitlines()
    assert header.split() == ["VERSION", "LIVE", "TEST", "NDCG@10", "GATE"]  # the columns say what they hold
    assert [r.split()[0] for r in rows] == [first, second]
    assert rows[1].index("live") == header.index("LIVE")

    ok = _cli("verify", "--bundles", str(bundles))
    assert ok.returncode == 0 and ok.stdout.count(" ok") == 2
    assert ok.stdout.splitlines()[0].split() == ["VERSION", "CHECKSUMS"]
    with (bundles / first / "ids.json").open("a") as f:
        f.write(" ")  # one byte changed after publication
    bad = _cli("verify", "--bundles", str(bundles), "--json")
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    assert (
        report[first] == {"ok": False, "problems": ["ids.json: checksum mismatch"]} and report[second]["ok"]
    )

    pruned = json.loads(_cli("prune", "--keep", "0", "--bundles", str(bundles), "--json").stdout)
    assert pruned == {"deleted": [first]} and (bundles / second).is_dir()  # the live one always stays


def test_errors_are_one_line(two_versions, tmp_path):
    bundles, _ = two_versions
    unknown = _cli("activate", "20990101T000000.000000Z-abcdef", "--bundles", str(bundles))
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: no bundle version")
    assert len(unknown.stderr.strip().splitlines()) == 1
    missing = _cli("list", "--bundles", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such folder" in missing.stderr and not (tmp_path / "nope").exists()


def test_the_commands_take_a_collection(two_versions, tmp_path, _base_encoder):
    """`--collection NAME` works on <SEARCH_COLLECTIONS_ROOT>/<NAME> (default root: <bundles>/collections);
    `default` is the bundles folder itself; names outside the rules are refused in one line."""
    import shutil

    from contract.bundles.collections import Collections
    from training.bundle.build import build_bundle
    from training.bundle.store import BundleStore

    bundles, _ = two_versions
    home = tmp_path / "bundles"
    shutil.copytree(bundles, home)
    docs = Collections(None, home).create("docs")
    corpus = {"x": Document("x", "a title", "a text about cells", {})}
    staged = build_bundle(
        _base_encoder,
        corpus,
        staging_dir=tmp_path / "stage",
        doc_embeddings=_base_encoder.encode(["a text"]),
        record=BundleRecord(metrics={"test": {"ndcg@10": 0.5}}),
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )
    only = BundleStore(docs).publish(staged, force=True).version
    listed = json.loads(_cli("list", "--bundles", str(home), "--collection", "docs", "--json").stdout)
    assert [v["version"] for v in listed["versions"]] == [only]
    default = json.loads(_cli("list", "--bundles", str(home), "--collection", "default", "--json").stdout)
    plain = json.loads(_cli("list", "--bundles", str(home), "--json").stdout)
    assert default == plain and default["versions"]
    assert only not in [v["version"] for v in default["versions"]]
    assert _cli("verify", "--bundles", str(home), "--collection", "docs").returncode == 0
    for bad, says in (("..", "collection name"), ("Docs", "collection name"), ("nope", "no collection")):
        refused = _cli("list", "--bundles", str(home), "--collection", bad)
        assert refused.returncode == 2 and says in refused.stderr and len(refused.stderr.splitlines()) == 1
