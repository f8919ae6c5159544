"""`python -m app.serve`: the worker count and threads chosen, handed to real worker processes, shown."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from app.engine.serving_plan import available_cores
from contract.mutations.log import MutationLog
from tests.app.conftest import publish, wait_until
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


def test_two_worker_processes_serve_and_say_how_they_were_chosen(staged, tmp_path):
    bundles = tmp_path / "bundles"  # its own folder: the replicas listed are this server's alone
    publish(staged["A"], bundles)
    # a process records itself only in a mutation log that exists (app/live/mutation_applier.py); one
    # delete of an id the bundle lacks creates the log and changes no search answer
    MutationLog(bundles).append_deletes(["not-in-the-bundle"])
    port = free_port()
    env = os.environ | {
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_WORKERS": "2",
        "SEARCH_ENCODER_BACKEND": "onnx-int8",
        "SEARCH_RELOAD_POLL_SECONDS": "0",
        "PYTHONPATH": str(REPO),
    }
    env.pop("SEARCH_API_KEY", None)
    before = {r.replica for r in MutationLog(bundles).replicas(3600)}
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "app.serve", "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def replicas() -> int:
        """Replicas recorded since this server started."""
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            body = httpx.get(url + "/bundles", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return 0
        return len({r["replica"] for r in body["mutations"]["replicas"]} - before)

    try:
        # each worker process records itself in the bundles folder's mutation log once it serves
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
        hits = httpx.post(url + "/search", json={"query": "bone density", "top_k": 3}, timeout=30)
        assert hits.status_code == 200 and len(hits.json()["results"][0]["hits"]) == 3
        assert "serving with 2 worker(s)" in log.read_text(errors="replace")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
