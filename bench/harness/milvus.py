"""A milvus-lite server on loopback for the benches that compare against Milvus."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.harness.ports import free_port


@contextmanager
def milvus_server(folder: Path) -> Iterator[str]:
    """A milvus-lite gRPC server (`python -m milvus_lite server`) on a free 127.0.0.1 port, data in
    `folder`; yields its http:// URI. Stops with the reason when milvus-lite is not installed."""
    if importlib.util.find_spec("milvus_lite") is None or importlib.util.find_spec("pymilvus") is None:
        raise SystemExit("milvus-lite / pymilvus not installed (pip install .[milvus])")
    port = free_port()
    cmd = [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(folder / "data")]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--max-workers", "4"]
    log = open(folder / "milvus.log", "wb")  # noqa: SIM115 - closed below, after the server stops
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(
                    f"milvus-lite server did not start: {(folder / 'milvus.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
