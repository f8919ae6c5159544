"""Starting and stopping the servers a bench measures: this service (uvicorn app.main) and the naive
baseline (bench/serving/naive_app.py), each a real uvicorn process on a loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.harness.paths import REPO

APP = "app.main:create_app"
NAIVE_APP = "bench.serving.naive_app:create_app"


def service_env(bundles: Path, backend: str, microbatch: bool, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_ENCODER_BACKEND": backend,
        "SEARCH_MICROBATCH_ENABLED": "true" if microbatch else "false",
        "SEARCH_RELOAD_POLL_SECONDS": "0",
        "SEARCH_QUEUE_MAX": "4096",
        "SEARCH_LOG_LEVEL": "WARNING",
        **extra,
    }


def uvicorn_cmd(target: str, port: int, *, factory: bool = True, workers: int = 1) -> list[str]:
    cmd = [sys.executable, "-m", "uvicorn", *(["--factory"] if factory else []), target]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    return cmd + (["--workers", str(workers)] if workers > 1 else [])


def serve_cmd(port: int = 0) -> list[str]:
    """`python -m app.serve` as a user starts it: its own worker count and threads (app/engine/serving_plan.py),
    one listening socket per worker (app/worker_sockets.py)."""
    cmd = [sys.executable, "-m", "app.serve", "--host", "127.0.0.1", "--port", str(port)]
    return cmd + ["--log-level", "warning", "--no-access-log"]


def settle_workers(started: float) -> None:
    """Wait, once the first worker of a multi-worker server answers, as long as it took (at most 60 s): the
    others started with it and load the same bundle."""
    time.sleep(min(60.0, time.perf_counter() - started))


def on_port(cmd: list[str], port: int) -> list[str]:
    """A command built with `--port 0` (the port not chosen yet), given its port."""
    return [str(port) if c == "0" and cmd[i - 1] == "--port" else c for i, c in enumerate(cmd)]


def start_server(
    cmd: list[str],
    env: dict[str, str],
    port: int,
    ready_path: str = "/readyz",
    timeout: float = 600,
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start cmd and wait until GET ready_path answers 200; its output goes to `log` when given."""
    if log is None:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    else:
        with open(log, "wb") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = f": {log.read_text()[-2000:]}" if log is not None else ""
            raise SystemExit(f"{cmd[2:5]} exited with {proc.returncode}{tail}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}{ready_path}", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"server not ready after {timeout} s")


def stop_server(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    proc.terminate()
    proc.wait(timeout=timeout)
