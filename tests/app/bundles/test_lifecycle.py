"""Bundle lifecycle through the real app: readiness, activation and its auth, hot swap under load,
failed loads that keep the old bundle serving, and back-pressure (429)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings, publish, wait_until
from training.bundle.store import BundleStore

KEY = {"X-API-Key": "test-key"}


def test_readiness_goes_from_503_to_200_when_a_bundle_is_published(tmp_path, staged, slice_data):
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    with TestClient(create_app(make_settings(bundles))) as client:
        assert client.get("/healthz").status_code == 200
        for method, path in (("GET", "/readyz"), ("POST", "/search"), ("GET", "/generalization-gap")):
            r = client.request(method, path, json={"query": "x"} if method == "POST" else None)
            assert r.status_code == 503, (path, r.text)
            assert r.json()["error"]["code"] == "no_live_bundle"
            assert "nothing is published" in r.json()["error"]["message"]
        version = publish(staged["A"], bundles)
        wait_until(lambda: client.get("/readyz").status_code == 200, what="the poller to load the bundle")
        ready = client.get("/readyz").json()
        assert ready["version"] == version and ready["n_vectors"] == len(slice_data.corpus)
        assert client.post("/search", json={"query": "x"}).json()["version"] == version


def test_activation_needs_the_right_key(tmp_path, staged):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles, force=False)  # worse test metric: kept as a candidate
    assert BundleStore(bundles).current_version() == a
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0))) as client:
        listing = client.get("/bundles").json()
        assert {v["version"]: v["live"] for v in listing["versions"]} == {a: True, b: False}
        kept = [g for g in listing["gate_decisions"] if g["version"] == b][0]
        assert kept["accepted"] is False and "kept as candidate" in kept["reason"]

        r = client.post(f"/bundles/{b}/activate")
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
        r = client.post(f"/bundles/{b}/activate", headers={"X-API-Key": "wrong"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        r = client.post("/bundles/20990101T000000.000000Z-abcdef/activate", headers=KEY)
        assert r.status_code == 404 and r.json()["error"]["code"] == "bundle_not_found"
        r = client.post("/bundles/..%2F..%2Fetc/activate", headers=KEY)
        assert r.status_code == 404
        assert client.post("/search", json={"query": "x"}).json()["version"] == a

        r = client.post(f"/bundles/{b}/activate", headers={"Authorization": "Bearer test-key"})
        assert r.status_code == 200, r.text
        assert r.json() == {"version": b, "previous": a, "encoder_backend": "torch"}
        assert BundleStore(bundles).current_version() == b
        assert client.post("/search", json={"query": "x"}).json()["version"] == b
        r = client.get("/generalization-gap")  # B was built without a report
        assert r.status_code == 404 and r.json()["error"]["code"] == "report_missing"
        assert b in r.json()["error"]["message"]
    with TestClient(create_app(make_settings(bundles, api_key=None, reload_poll_seconds=0))) as client:
        r = client.post(f"/bundles/{a}/activate", headers=KEY)
        assert r.status_code == 403 and "SEARCH_API_KEY" in r.json()["error"]["message"]


def test_hot_swap_under_concurrent_requests_fails_no_request(tmp_path, staged, slice_data):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles, force=False)
    queries = list(slice_data.queries.values())
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0.1))) as client:
        stop = threading.Event()
        seen: list[tuple[int, str | None, str | None]] = []
        started_on: list[tuple[float, str | None]] = []  # (request start, version that answered)

        def hammer(worker: int) -> None:
            i = 0
            while not stop.is_set():
                t0 = time.monotonic()
                r = client.post("/search", json={"query": queries[(worker + i) % len(queries)], "top_k": 5})
                body = r.json()
                top = body["results"][0]["hits"][0]["id"] if r.status_code == 200 else None
                seen.append((r.status_code, body.get("version"), top))
                started_on.append((t0, body.get("version")))
                i += 1

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(hammer, w) for w in range(4)]
            wait_until(lambda: len(seen) >= 10, what="traffic before the swap")
            r = client.post(f"/bundles/{b}/activate", headers=KEY)  # roll forward through the API
            assert r.status_code == 200, r.text
            n_after_b = len(seen)
            wait_until(lambda: len(seen) >= n_after_b + 10, what="traffic on B")
            BundleStore(bundles).activate(a)  # roll back from outside, as another process would
            wait_until(
                lambda: client.get("/bundles").json()["live"] == a, what="the poller to follow CURRENT"
            )
            swapped_at = time.monotonic()
            n_after_a = len(seen)
            wait_until(lambda: len(seen) >= n_after_a + 10, what="traffic after the rollback")
            stop.set()
            for f in futures:
                f.result()
    statuses = {s for s, _, _ in seen}
    assert statuses == {200}, [x for x in seen if x[0] != 200][:5]
    versions = [v for _, v, _ in seen]
    assert {a, b} <= set(versions)
    # in-flight requests may finish on the old bundle; every request that started after the swap is on A
    after = [v for t0, v in started_on if t0 > swapped_at]
    assert after and set(after) == {a}
    assert all(top is not None for _, _, top in seen)


def _replace_file(path, data: bytes) -> None:
    # published files are hard links to the session's staged bundle: never write through them
    path.unlink()
    path.write_bytes(data)


def test_failed_load_keeps_the_old_bundle_serving(tmp_path, staged, caplog):
    bundles = tmp_path / "bundles"
    a = publish(staged["A"], bundles)
    b = publish(staged["B"], bundles, force=False)
    _replace_file(bundles / b / "index.faiss", b"not a faiss index")
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0.1))) as client:
        assert client.get("/readyz").status_code == 200
        # another process points CURRENT at the corrupt version (bypassing BundleStore's validation)
        tmp = bundles / ".CURRENT.test"
        tmp.write_text(b + "\n")
        os.replace(tmp, bundles / "CURRENT")
        failure = wait_until(
            lambda: client.get("/bundles").json()["last_failed_load"],
            what="the poller to try the corrupt bundle",
        )
        assert failure["version"] == b and "index.faiss" in failure["error"]
        r = client.post("/search", json={"query": "x"})
        assert r.status_code == 200 and r.json()["version"] == a
        assert client.get("/readyz").json()["version"] == a
        listing = client.get("/bundles").json()
        assert listing["live"] == a and listing["current"] == b
        # an explicit activation retries, fails the same way, and says why
        r = client.post(f"/bundles/{b}/activate", headers=KEY)
        assert r.status_code == 409 and r.json()["error"]["code"] == "bundle_invalid"
        assert client.post("/search", json={"query": "x"}).json()["version"] == a
        assert 'search_bundle_loads_total{outcome="failed"}' in client.get("/metrics").text
    assert any("still serving" in rec.message and b in rec.message for rec in caplog.records)


@pytest.mark.parametrize("microbatch", [True, False])
def test_full_queue_is_429_and_queued_requests_still_finish(live_bundles, microbatch):
    bundles, _ = live_bundles
    settings = make_settings(
        bundles, queue_max=1, microbatch_enabled=microbatch, microbatch_max_size=1, reload_poll_seconds=0
    )
    with TestClient(create_app(settings)) as client:
        runner, inference = client.app.state.runner, client.app.state.inference
        gate = threading.Event()
        inference.executor.submit(gate.wait, 30)  # occupy the inference thread
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/search", json={"query": "first"})
            if microbatch:
                wait_until(lambda: runner.in_flight == 1, what="the batcher to take the first request")
                second = pool.submit(client.post, "/search", json={"query": "second"})
            else:
                second = None
            wait_until(lambda: runner.pending() == 1, what="a request waiting in the queue")
            r = client.post("/search", json={"query": "one too many"})
            assert r.status_code == 429, r.text
            assert r.json()["error"]["code"] == "queue_full"
            gate.set()
            assert first.result(timeout=30).status_code == 200
            if second is not None:
                assert second.result(timeout=30).status_code == 200
        time.sleep(0)  # the server answers normally again
        assert client.post("/search", json={"query": "after"}).status_code == 200
