"""Unreadable pointers and records, restarts on a corrupt CURRENT, a live folder deleted while serving
(issue 11, items 4, 7 and 10): never a 500, always visible in /bundles, logged once per change."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings, publish, wait_until

KEY = {"X-API-Key": "test-key"}
REPO = Path(__file__).resolve().parents[3]


def _replace(path, data: bytes) -> None:
    # published files are hard links to the session's staged bundle: never write through them
    path.unlink()
    path.write_bytes(data)


def _point(bundles, data: bytes) -> None:
    tmp = bundles / ".CURRENT.test"
    tmp.write_bytes(data)
    os.replace(tmp, bundles / "CURRENT")


def _failures(caplog, what: str) -> int:
    return sum("loading bundle CURRENT failed" in r.message and what in r.message for r in caplog.records)


def test_unreadable_current_is_a_failed_load_logged_once_and_cleared_when_repaired(tmp_path, staged, caplog):
    caplog.set_level(logging.INFO)
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0.02))) as client:
        _point(bundles, b"\xff\xfe not utf-8\n")
        failure = wait_until(lambda: client.get("/bundles").json()["last_failed_load"], what="the failure")
        assert failure["version"] == "CURRENT" and "not a version id" in failure["error"]
        time.sleep(0.3)  # ~15 more polls
        assert _failures(caplog, "not a version id") == 1
        assert client.post("/search", json={"query": "x"}).json()["version"] == a  # still serving
        (bundles / "CURRENT").unlink()
        (bundles / "CURRENT").mkdir()  # a directory where the pointer should be
        wait_until(
            lambda: (
                "unreadable" in (client.get("/bundles").json()["last_failed_load"] or {}).get("error", "")
            ),
            what="the second failure",
        )
        r = client.get("/bundles")
        assert r.status_code == 200 and r.json()["current"] is None
        time.sleep(0.3)
        assert _failures(caplog, "unreadable") == 1
        (bundles / "CURRENT").rmdir()
        _point(bundles, f"{a}\n".encode())
        wait_until(lambda: client.get("/bundles").json()["last_failed_load"] is None, what="recovery")


MARKER = "ZQX-secret-line-7731"


@pytest.mark.parametrize("shape", ["link", "long", "text", "link-to-version"])
def test_current_is_read_as_a_version_name_and_never_echoed(tmp_path, staged, shape):
    """Issue 43 item 3: whatever CURRENT holds or points at, GET /bundles (public) shows none of its bytes."""
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{MARKER}\nroot:x:0:0:{tmp_path}\n")
    (bundles / "CURRENT").unlink()
    if shape == "link":
        (bundles / "CURRENT").symlink_to(secret)
    elif shape == "link-to-version":  # even a link to a good pointer is not followed
        (tmp_path / "elsewhere").write_text(a + "\n")
        (bundles / "CURRENT").symlink_to(tmp_path / "elsewhere")
    elif shape == "long":
        (bundles / "CURRENT").write_text(a + "\n" + MARKER * 100)
    else:
        (bundles / "CURRENT").write_text(MARKER + "\n")
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        body = client.get("/bundles").text
        assert client.get("/bundles").status_code == 200
        assert MARKER not in body and "root:x" not in body and str(tmp_path) not in body
        assert "CURRENT" in client.get("/bundles").json()["last_failed_load"]["error"]
        assert client.post("/search", json={"query": "x"}).json()["version"] == a  # the fallback serves


def test_malformed_gate_records_and_manifests_are_listed_as_unreadable(tmp_path, staged):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles, force=False)
    _replace(bundles / a / "gate.json", b'{"version": 5')
    _replace(bundles / b / "manifest.json", b"\xff")
    with (bundles / "gate.jsonl").open("ab") as f:
        f.write(b"\xff\xfe\n42\n[1]\n" + b"[" * 50_000 + b"\n")
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        r = client.get("/bundles")
        assert r.status_code == 200, r.text
        listing = r.json()
        assert [v["version"] for v in listing["versions"]] == [a]
        assert listing["versions"][0]["gate"] is None
        problems = {u["version"]: u["error"] for u in listing["unreadable"]}
        assert "gate.json is unreadable" in problems[a] and "manifest" in problems[b]
        assert all(isinstance(g, dict) for g in listing["gate_decisions"])
        assert str(tmp_path) not in r.text


def test_a_restart_on_a_corrupt_current_falls_back_to_the_newest_valid_version(tmp_path, staged):
    bundles = tmp_path / "bundles"
    older = publish(staged["A"], bundles)
    newer = publish(staged["B"], bundles)  # forced live
    _replace(bundles / newer / "index.faiss", b"not a faiss index")
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        assert client.get("/readyz").status_code == 200
        listing = client.get("/bundles").json()
        assert listing["live"] == older and listing["current"] == newer
        assert listing["fallback_from"] == newer
        assert listing["last_failed_load"]["version"] == newer
        assert listing["last_failed_load"]["error"].startswith(f"{newer}/")  # relative: /bundles is public
        assert str(tmp_path) not in client.get("/bundles").text
        assert "search_bundle_fallback 1.0" in client.get("/metrics").text
        # the operator repairs it by activating a version: CURRENT and live agree again
        assert client.post(f"/bundles/{older}/activate", headers=KEY).status_code == 200
        listing = client.get("/bundles").json()
        assert listing["fallback_from"] is None and listing["last_failed_load"] is None
        assert "search_bundle_fallback 0.0" in client.get("/metrics").text


def test_deleting_the_live_folder_while_serving_is_detected(tmp_path, staged):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0.02))) as client:
        assert client.get("/readyz").status_code == 200
        shutil.rmtree(bundles / a)
        r = client.get("/readyz")
        assert r.status_code == 503 and "gone from disk" in r.json()["error"]["message"]
        failure = wait_until(lambda: client.get("/bundles").json()["last_failed_load"], what="the report")
        assert failure["version"] == a and "deleted" in failure["error"]


_OPENED: list[str] = []
sys.addaudithook(lambda event, args: _OPENED.append(str(args[0])) if event == "open" and args else None)


def test_reactivating_the_live_version_reads_nothing_and_the_gate_log_pages(tmp_path, staged):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles, force=False)
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        _OPENED.clear()
        r = client.post(f"/bundles/{a}/activate", headers=KEY)
        assert r.status_code == 200 and r.json()["version"] == a
        assert [p for p in _OPENED if f"{os.sep}{a}{os.sep}" in p] == []  # no re-hash of the live bundle
        page = client.get("/bundles", params={"gate_limit": 1}).json()
        assert page["gate_total"] == 2 and [g["version"] for g in page["gate_decisions"]] == [
            b
        ]  # newest first
        older = client.get("/bundles", params={"gate_limit": 1, "gate_offset": 1}).json()
        assert [g["version"] for g in older["gate_decisions"]] == [a]
        assert client.get("/bundles", params={"gate_limit": 1001}).status_code == 422


# -- issue 27: damage while serving, restarts and crashes (items 2, 6, 7, 8) ----------------------------
def _private(path) -> None:
    """Give a published (hard-linked) file its own inode, so it can be damaged in place."""
    _replace(path, path.read_bytes())


def _truncate_in_place(path, size: int = 0) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def test_readiness_reads_the_document_store_and_a_damaged_one_falls_back(tmp_path, staged):
    """Item 2: a docs.sqlite truncated in place under the live bundle makes /readyz 503 (it said 200),
    and the replica falls back to the newest version that loads."""
    bundles = tmp_path / "bundles"
    older = publish(staged["B"], bundles)
    newer = publish(staged["A"], bundles)
    _private(bundles / newer / "docs.sqlite")
    with TestClient(
        create_app(make_settings(bundles, reload_poll_seconds=0)), raise_server_exceptions=False
    ) as client:
        assert client.get("/readyz").status_code == 200
        _truncate_in_place(bundles / newer / "docs.sqlite")
        r = client.get("/readyz")
        assert r.status_code == 503, r.text
        assert "docs.sqlite" in r.json()["error"]["message"] and str(tmp_path) not in r.text
        wait_until(lambda: client.get("/readyz").status_code == 200, what="the fallback")
        listing = client.get("/bundles").json()
        assert listing["live"] == older and listing["fallback_from"] == newer
        assert "docs.sqlite" in listing["last_failed_load"]["error"]
        hit = client.post("/search", json={"query": "cells", "include": ["title", "text"]})
        assert hit.status_code == 200 and hit.json()["version"] == older


def test_a_request_that_meets_a_damaged_document_store_gets_a_503_never_a_500(tmp_path, staged):
    """Item 2: every route that reads documents answers 503 in the one error shape while the damaged
    version serves, and the replica then serves the older version."""
    bundles = tmp_path / "bundles"
    older = publish(staged["B"], bundles)
    newer = publish(staged["A"], bundles)
    _private(bundles / newer / "docs.sqlite")
    with TestClient(
        create_app(make_settings(bundles, reload_poll_seconds=0)), raise_server_exceptions=False
    ) as client:
        doc_id = client.post("/search", json={"query": "cells"}).json()["results"][0]["hits"][0]["id"]
        _truncate_in_place(bundles / newer / "docs.sqlite")
        r = client.post("/search", json={"query": "cells", "include": ["title"]})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "bundle_damaged" and str(tmp_path) not in r.text
        statuses = set()
        for _ in range(20):
            statuses.add(client.get(f"/documents/{doc_id}").status_code)
            statuses.add(
                client.post("/search", json={"query": "cells", "filter": {"even": True}}).status_code
            )
            statuses.add(
                client.post(
                    "/search", json={"query": "cells", "mode": "lexical", "include": ["text"]}
                ).status_code
            )
        assert 500 not in statuses
        wait_until(lambda: client.get("/bundles").json()["live"] == older, what="the fallback")
        assert client.get(f"/documents/{doc_id}").status_code == 200
        assert client.get("/readyz").status_code == 200


def test_a_restart_with_current_deleted_falls_back_to_the_newest_version(tmp_path, staged):
    """Item 6: a missing CURRENT with loadable versions beside it is served like a garbage CURRENT."""
    bundles = tmp_path / "bundles"
    publish(staged["A"], bundles)
    newest = publish(staged["B"], bundles)
    (bundles / "CURRENT").unlink()
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        r = client.get("/readyz")
        assert r.status_code == 200, r.text
        listing = client.get("/bundles").json()
        assert listing["live"] == newest and listing["current"] is None
        assert listing["fallback_from"] == "CURRENT"
        assert "CURRENT" in listing["last_failed_load"]["error"]


def test_a_corrupted_gate_record_stops_activation(tmp_path, staged):
    """Item 8: gate.json is checksummed like the rest of the bundle."""
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles, force=False)
    gate = json.loads((bundles / b / "gate.json").read_text())
    gate["accepted"], gate["reason"] = True, "edited after publication"
    _replace(bundles / b / "gate.json", json.dumps(gate).encode())
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        r = client.post(f"/bundles/{b}/activate", headers=KEY)
        assert r.status_code == 409, r.text
        assert "gate.json" in r.json()["error"]["message"] and str(tmp_path) not in r.text
        assert client.get("/bundles").json()["live"] == a


def _restamped(staged_dir, tmp_path):
    """A hard-linked copy of a staged bundle under a new version id (the manifest is not checksummed)."""
    from contract.bundles.bundle import new_version_id

    copy = tmp_path / f"restamped-{staged_dir.name}"
    shutil.copytree(staged_dir, copy, copy_function=os.link)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["version"] = new_version_id()
    _replace(copy / "manifest.json", json.dumps(manifest).encode())
    return copy


_DIE_AT_CURRENT = """
import os, signal, sys
from training.bundle.store import BundleStore
real = os.replace
def replace(src, dst, *args, **kwargs):
    if os.path.basename(str(dst)) == "CURRENT":  # the new CURRENT is written, not yet in place
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
BundleStore(sys.argv[1]).publish(sys.argv[2], force=True)
"""


def test_a_publisher_killed_after_the_rename_leaves_a_record_of_it_and_no_temp_file(tmp_path, staged):
    """Item 7: kill -9 (a real subprocess) between the rename and CURRENT: no record claims a decision
    that did not take effect, the next publish records what happened and sweeps `.CURRENT.*.tmp`."""
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    copy = bundles / ".copy-killed"
    shutil.copytree(staged["B"], copy, copy_function=os.link)
    proc = subprocess.run([sys.executable, "-c", _DIE_AT_CURRENT, str(bundles), str(copy)], cwd=REPO,
                          capture_output=True, timeout=120)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert (bundles / "CURRENT").read_text().strip() == a
    killed = [
        p.name for p in bundles.iterdir() if p.is_dir() and p.name not in (a,) and not p.name.startswith(".")
    ]
    assert len(killed) == 1  # renamed into place, never made live
    records = [json.loads(line) for line in (bundles / "gate.jsonl").read_text().splitlines()]
    assert not [r for r in records if r.get("version") == killed[0] and r.get("accepted")], records
    assert list(bundles.glob(".CURRENT.*.tmp"))  # what the kill left
    publish(_restamped(staged["A"], tmp_path), bundles, force=False)  # the next publish
    assert list(bundles.glob(".CURRENT.*.tmp")) == []
    records = [json.loads(line) for line in (bundles / "gate.jsonl").read_text().splitlines()]
    story = [r for r in records if r.get("version") == killed[0]]
    assert [r["event"] for r in story] == ["publish_interrupted"], story
    assert story[0]["made_live"] is False and "CURRENT" in story[0]["reason"]


def test_nothing_live_messages_name_no_server_path(tmp_path):
    """Item 5: with nothing published, the public routes say so without the bundles folder's path."""
    bundles = tmp_path / "bundles"
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        answers = [
            client.get("/readyz"),
            client.post("/search", json={"query": "x"}),
            client.get("/ui/overview"),
            client.get("/generalization-gap"),
        ]
        for r in answers:
            assert "nothing is published" in r.text, r.text
            assert str(tmp_path) not in r.text and "/bundles" not in r.text, r.text
