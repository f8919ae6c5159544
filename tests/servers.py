"""Real loopback servers the tests start themselves (never a fake at the edge they are proving)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


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
