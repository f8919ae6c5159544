"""`python -m training bundles list|activate|prune|verify` on a real bundles folder, as an operator runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.data.retrieval_data import Document

REPO = Path(__file__).resolve().parents[2]


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
            _base_encoder, corpus, staging_dir=root / f"stage{n}", doc_embeddings=emb, index_kind="flat",
            metrics={"test": {"ndcg@10": ndcg}}, show_progress=False,
        )  # fmt: skip
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

    ok = _cli("verify", "--bundles", str(bundles))
    assert ok.returncode == 0 and ok.stdout.count(" ok") == 2
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
