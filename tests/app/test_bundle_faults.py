"""Unreadable pointers and records, restarts on a corrupt CURRENT, a live folder deleted while serving
(issue 11, items 4, 7 and 10): never a 500, always visible in /bundles, logged once per change."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings, publish, wait_until

pytestmark = pytest.mark.scifact
KEY = {"X-API-Key": "test-key"}


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
        assert failure["version"] == "CURRENT" and "UTF-8" in failure["error"]
        time.sleep(0.3)  # ~15 more polls
        assert _failures(caplog, "UTF-8") == 1
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
