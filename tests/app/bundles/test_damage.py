"""Damage to a live bundle's files (issue 43, storage items): a truncated index or model never kills the
process (nothing is memory-mapped), a flipped byte is found by the scrub, a touch is not damage, a fallback
skips a version that hard-links the damaged file, and CURRENT is read as a version id only (never echoed)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from contract.bundles.folder import read_current
from contract.errors import BundleInvalid
from tests.app.bundles.test_bundle_faults import _private, _restamped
from tests.app.conftest import make_settings, publish, wait_until
from tests.conftest import REPO
from tests.servers import free_port


def _flip_byte(path) -> None:
    """One byte changed in place in the middle of the file: same inode, size and mtime."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size


def _serve(bundles, tmp_path):
    env = os.environ | {
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_WORKERS": "1",
        "SEARCH_ENCODER_BACKEND": "torch",
        "SEARCH_RELOAD_POLL_SECONDS": "0",
        "PYTHONPATH": str(REPO),
    }
    env.pop("SEARCH_API_KEY", None)
    port = free_port()
    cmd = [sys.executable, "-m", "app.serve", "--host", "127.0.0.1", "--port", str(port)]
    with open(tmp_path / "serve.log", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def test_a_live_index_and_model_truncated_under_a_real_server_never_kill_it(tmp_path, staged):
    """Item 1: with index.faiss memory-mapped (and the model's safetensors mapped by transformers), a
    truncation turned the next dense search into SIGBUS: the process died with nothing logged. Now the
    search answers (200 from the copy in memory, or 503), the process lives, and the replica falls back."""
    bundles = tmp_path / "bundles"
    older = publish(staged["B"], bundles)
    live = publish(staged["A"], bundles)
    for rel in ("index.faiss", "model/model.safetensors"):
        _private(bundles / live / rel)  # never truncate the session's staged file through a hard link
    proc, url = _serve(bundles, tmp_path)
    log = lambda: (tmp_path / "serve.log").read_text(errors="replace")[-3000:]  # noqa: E731

    def ready() -> bool:
        assert proc.poll() is None, log()
        try:
            return httpx.get(url + "/readyz", timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, timeout=300, what="the server", interval=0.5, detail=log)
        assert httpx.get(url + "/bundles", timeout=30).json()["live"] == live
        for rel in ("index.faiss", "model/model.safetensors"):
            os.truncate(bundles / live / rel, os.path.getsize(bundles / live / rel) // 2)
        r = httpx.post(url + "/search", json={"query": "queue", "mode": "dense"}, timeout=60)
        assert proc.poll() is None, f"the server died (signal {-proc.returncode})\n{log()}"
        assert r.status_code in (200, 503), r.text
        wait_until(ready, timeout=120, what="the fallback", interval=0.2, detail=log)
        listing = httpx.get(url + "/bundles", timeout=30).json()
        assert listing["live"] == older and "index.faiss" in listing["last_failed_load"]["error"]
        r = httpx.post(url + "/search", json={"query": "queue", "mode": "dense"}, timeout=60)
        assert r.status_code == 200 and r.json()["version"] == older
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_fallback_skips_a_version_that_hard_links_the_damaged_file(tmp_path, staged, caplog):
    """Item 1: a query-side version shares index.faiss with its parent through a hard link, so damage to
    one is damage to both: the fallback goes past the sharer without loading it, to the next version."""
    caplog.set_level(logging.INFO)
    bundles = tmp_path / "bundles"
    oldest = publish(staged["B"], bundles)
    # restamped: version ids newer than B's, so the fallback meets the sharer first
    sharer = publish(_restamped(staged["A"], tmp_path / "sharer"), bundles)
    live = publish(_restamped(staged["A"], tmp_path / "live"), bundles)
    _private(bundles / live / "index.faiss")
    (bundles / sharer / "index.faiss").unlink()
    os.link(bundles / live / "index.faiss", bundles / sharer / "index.faiss")
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0, scrub_interval_s=0))) as client:
        assert client.get("/bundles").json()["live"] == live
        os.truncate(bundles / live / "index.faiss", os.path.getsize(bundles / live / "index.faiss") // 2)
        assert client.get("/readyz").status_code == 503
        wait_until(lambda: client.get("/readyz").status_code == 200, what="the fallback")
        assert client.get("/bundles").json()["live"] == oldest
    assert any(f"not falling back to {sharer}" in r.message for r in caplog.records)
    assert not [r.message for r in caplog.records if f"loading bundle {sharer} failed" in r.message]


@pytest.mark.parametrize("rel", ["index.faiss", "docs.sqlite"])
def test_a_flipped_byte_is_found_by_the_scrub_and_the_replica_falls_back(tmp_path, staged, rel):
    """Item 2: a byte flipped in place (size and mtime kept) changed dense results with /readyz 200, and
    in docs.sqlite went unnoticed; the scrub hashes every file against the manifest and finds it."""
    bundles = tmp_path / "bundles"
    older = publish(staged["B"], bundles)
    live = publish(staged["A"], bundles)
    _private(bundles / live / rel)
    settings = make_settings(bundles, reload_poll_seconds=0, scrub_interval_s=0.2)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.get("/bundles").json()["live"] == live
        _flip_byte(bundles / live / rel)
        wait_until(lambda: client.get("/bundles").json()["live"] == older, what="the scrub's fallback")
        listing = client.get("/bundles").json()
        error = listing["last_failed_load"]["error"]
        assert f"{live}/{rel}" in error and "sha256" in error and str(tmp_path) not in error
        assert listing["fallback_from"] is not None
        assert client.get("/readyz").status_code == 200


def test_touching_or_recopying_live_files_is_not_damage_but_a_size_change_is(tmp_path, staged):
    """Item 8a: `touch` (content unchanged) on gate.json or docs.sqlite marked the bundle damaged and
    rolled the replica back; a file whose stat changed is now hashed, and only different bytes count."""
    bundles = tmp_path / "bundles"
    publish(staged["B"], bundles)
    live = publish(staged["A"], bundles)
    for rel in ("gate.json", "docs.sqlite"):
        _private(bundles / live / rel)
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0, scrub_interval_s=0))) as client:
        assert client.get("/readyz").status_code == 200
        for rel in ("gate.json", "docs.sqlite"):
            os.utime(bundles / live / rel, ns=(0, os.stat(bundles / live / rel).st_mtime_ns + 10**10))
        _private(bundles / live / "README.md")  # the same bytes in a new inode
        for _ in range(3):
            r = client.get("/readyz")
            assert r.status_code == 200, r.text
        listing = client.get("/bundles").json()
        assert listing["live"] == live and listing["last_failed_load"] is None
        with open(bundles / live / "gate.json", "ab") as f:
            f.write(b" ")  # still valid JSON, one byte longer: damage, without hashing
        r = client.get("/readyz")
        assert r.status_code == 503 and f"{live}/gate.json" in r.json()["error"]["message"]


@pytest.mark.parametrize("kind", ["link", "text", "long"])
def test_current_is_read_as_a_version_id_and_never_echoed(tmp_path, staged, kind):
    """Item 3: GET /bundles (public) showed the text of whatever CURRENT linked to; CURRENT is a version id
    or refused with a message that holds none of its bytes."""
    bundles = tmp_path / "bundles"
    live = publish(staged["A"], bundles)
    marker = f"MARKER-{uuid.uuid4().hex}"
    secret = tmp_path / "secret.txt"
    secret.write_text(f"PRETTY_NAME={marker}\n" * (1 if kind != "long" else 20))
    with TestClient(
        create_app(make_settings(bundles, reload_poll_seconds=0.02, scrub_interval_s=0))
    ) as client:
        assert client.get("/bundles").json()["current"] == live
        tmp = bundles / "CURRENT.lnk"
        if kind == "link":
            tmp.symlink_to(secret)
        else:
            tmp.write_bytes(secret.read_bytes())
        os.replace(tmp, bundles / "CURRENT")
        failure = wait_until(lambda: client.get("/bundles").json()["last_failed_load"], what="the refusal")
        assert failure["version"] == "CURRENT"
        assert ("a link" in failure["error"]) if kind == "link" else ("not a version id" in failure["error"])
        for route in ("/bundles", "/collections", "/readyz", "/ui/overview"):
            r = client.get(route)
            assert marker not in r.text and "PRETTY_NAME" not in r.text, route
        assert client.get("/bundles").json()["live"] == live  # still serving what loaded


def test_read_current_refuses_what_is_not_a_plain_version_file(tmp_path):
    path = tmp_path / "CURRENT"
    assert read_current(path) is None
    os.mkfifo(path)  # a FIFO would block a plain open() forever
    with pytest.raises(BundleInvalid, match="not a regular file"):
        read_current(path)
    path.unlink()
    path.write_text("20260101T000000.000000Z-abcdef\n")
    assert read_current(path) == "20260101T000000.000000Z-abcdef"
    path.write_text("../../etc\n")
    with pytest.raises(BundleInvalid, match=r"not a version id \(10 bytes\)"):
        read_current(path)
