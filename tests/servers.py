"""Real loopback servers the tests start themselves (never a fake at the edge they are proving)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from bench.harness.milvus import MilvusStandalone, MilvusUnavailable
from bench.harness.milvus import milvus_server as lite_server
from bench.harness.milvus import milvus_standalone_process as standalone_process


@contextmanager
def serve_app(app: object) -> Iterator[str]:
    """An ASGI app served by uvicorn on a free 127.0.0.1 port in a thread (real HTTP); yields its URL."""
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server(folder: Path, *, password: str | None = None, what: str = "Redis tests") -> Iterator[int]:
    """A redis-server on a free 127.0.0.1 port, no persistence; yields the port. Skips when not installed."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip(f"redis-server not on PATH (apt-get install redis-server); {what} not run")
    port = free_port()
    cmd = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    cmd += ["--dir", str(folder)] + (["--requirepass", password] if password else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None and time.monotonic() < end, "redis-server did not start"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def milvus_server(folder: Path) -> Iterator[str]:
    """The benches' milvus-lite server (bench/harness/milvus.py) on a free 127.0.0.1 port, data in `folder`;
    yields its http:// URI. Skips when milvus-lite is not installed (`pip install .[milvus]`)."""
    with contextlib.ExitStack() as stack:
        try:
            uri = stack.enter_context(lite_server(folder))
        except MilvusUnavailable as exc:
            pytest.skip(f"{exc}; Milvus backend tests not run")
        yield uri


def _unavailable(why: str) -> NoReturn:
    """Skip with the reason; fail under CI=true, where the server's tests must run (as tests/browser.py)."""
    import os

    # the CI runner's own variable (.ci/run runs with CI=true), not a setting of this service
    if os.environ.get("CI") == "true":  # noqa: TID251
        pytest.fail(f"Milvus server tests must run in CI: {why}")
    pytest.skip(why)


@contextmanager
def milvus_standalone(folder: Path, *, timeout_s: float = 420) -> Iterator[str]:
    """The real Milvus standalone server on free 127.0.0.1 ports (bench/harness/milvus.py), data in
    `folder`; yields its http:// URI."""
    with milvus_standalone_process(folder, timeout_s=timeout_s) as server:
        yield server.uri


@contextmanager
def milvus_standalone_process(folder: Path, *, timeout_s: float = 420) -> Iterator[MilvusStandalone]:
    """The launcher the benches use too (one copy), a missing or unrunnable server a skip (a failure in CI)."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(standalone_process(folder, timeout_s=timeout_s))
        except MilvusUnavailable as exc:
            _unavailable(str(exc))
        yield server
