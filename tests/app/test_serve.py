"""`python -m app.serve`: the worker count and threads chosen, handed to real worker processes, shown."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from collections import Counter

import httpx
import pytest

from app.engine.serving_plan import available_cores
from bench.processes.worker_balance import TCP_LISTEN, socket_inodes
from tests.app.conftest import wait_until
from tests.conftest import REPO
from tests.servers import free_port


def test_a_cgroup_quota_caps_the_cores(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs: rounded up
    assert available_cores(cpu_max) == min(2, len(os.sched_getaffinity(0)))
    cpu_max.write_text("max 100000\n")  # no quota
    assert available_cores(cpu_max) == len(os.sched_getaffinity(0))
    assert available_cores(tmp_path / "absent") == len(os.sched_getaffinity(0))


def test_the_worker_count_is_a_setting_not_a_flag():
    from app.serve import main

    with pytest.raises(SystemExit, match="SEARCH_WORKERS"):
        main(["--workers", "2"])


BURST = 32


def burst_replicas(port: int, n: int) -> list[str]:
    """Open `n` connections at once (non-blocking connects, as a load generator's or a pool's burst), then
    ask each GET /bundles: the replica id of the worker that accepted each connection."""
    conns = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for conn in conns:
            conn.setblocking(False)
            conn.connect_ex(("127.0.0.1", port))  # in progress: the handshakes all complete in the kernel
        for conn in conns:
            select.select([], [conn], [], 60)
            conn.setblocking(True)
            conn.settimeout(60)
        for conn in conns:
            conn.sendall(b"GET /bundles HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        replicas = []
        for conn in conns:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head[:200]
            replicas.append(json.loads(body)["mutations"]["replica"])
        return replicas
    finally:
        for conn in conns:
            conn.close()


def test_two_worker_processes_serve_and_say_how_they_were_chosen(live_bundles, tmp_path):
    bundles, _ = live_bundles
    port = free_port()
    env = os.environ | {
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_WORKERS": "2",
        "SEARCH_ENCODER_BACKEND": "onnx-int8",
        "SEARCH_RELOAD_POLL_SECONDS": "0",
        "PYTHONPATH": str(REPO),
    }
    env.pop("SEARCH_API_KEY", None)
    answered: set[str] = set()
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "app.serve", "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def replicas() -> int:
        """Distinct worker processes that answered GET /bundles so far (each names its replica id; new
        connections are spread over the workers by the kernel)."""
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            body = httpx.get(url + "/bundles", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return len(answered)
        answered.add(body["mutations"]["replica"])
        return len(answered)

    try:
        # both worker processes answer (a process that never started would never be seen)
        wait_until(
            lambda: replicas() >= 2,
            timeout=300,
            what="two workers serving",
            interval=0.5,
            detail=lambda: log.read_text(errors="replace")[-3000:],
        )
        serving = httpx.get(url + "/bundles", timeout=5).json()["serving"]
        assert serving["workers"] == 2 and serving["reason"] == "SEARCH_WORKERS"
        assert serving["encoder_threads"] == max(1, serving["cores"] // 2)
        # one thread a worker leaves a core idle at low load: the int8 encoder's spare-core session
        wide = min(serving["cores"], 2 * serving["encoder_threads"])
        assert serving["spare_cores"]["threads"] == (wide if wide > serving["encoder_threads"] else 0)
        hits = httpx.post(url + "/search", json={"query": "bone density", "top_k": 3}, timeout=30)
        assert hits.status_code == 200 and len(hits.json()["results"][0]["hits"]) == 3
        assert "serving with 2 worker(s)" in log.read_text(errors="replace")
        # a burst of connections opened at once is split over both workers, not all taken by the first to
        # wake (uvicorn's one shared socket: 0/32 and 28/4, bench/results/worker_balance.txt)
        split = Counter(burst_replicas(port, BURST))
        assert len(split) == 2 and max(split.values()) <= BURST - 6, split
        assert (
            len(socket_inodes(port, TCP_LISTEN)) == 2
        )  # one per worker (uvicorn's shared socket: one in all)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
