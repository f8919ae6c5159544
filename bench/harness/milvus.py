"""Milvus servers on loopback for the benches and the tests: milvus-lite (`milvus_server`) and the real
standalone server (`milvus_standalone_process`, which the tests' session fixture and
bench/index/milvus_scale.py both start). Tests turn `MilvusUnavailable` into a skip (tests/servers.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.harness.ports import free_port


class MilvusUnavailable(RuntimeError):
    """This machine cannot run the server asked for (not installed, or its binary cannot execute here)."""


@contextmanager
def milvus_server(folder: Path) -> Iterator[str]:
    """A milvus-lite gRPC server (`python -m milvus_lite server`) on a free 127.0.0.1 port, data in
    `folder`; yields its http:// URI. MilvusUnavailable when milvus-lite is not installed."""
    if importlib.util.find_spec("milvus_lite") is None or importlib.util.find_spec("pymilvus") is None:
        raise MilvusUnavailable("milvus-lite / pymilvus not installed (pip install .[milvus])")
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
                raise RuntimeError(
                    f"milvus-lite server did not start: {(folder / 'milvus.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def group_pids(group: int) -> Iterator[int]:
    """The processes of one process group: a launcher started in a session of its own and the `milvus`
    server it started."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(proc.name)) == group:
                    yield int(proc.name)


_STANDALONE_PORTS = ("etcd", "root-coord", "proxy-internal", "query-coord", "query-node")
_STANDALONE_PORTS += ("index-coord", "index-node", "data-coord", "data-node")


def standalone_command(launcher: list[str], data: Path) -> tuple[list[str], str]:
    """`launcher` (`milvus-server`, or the image's docker/milvus_launch.py under a Python: same arguments)
    with its data folder and every listen port free on 127.0.0.1; returns the command and the proxy's URI."""
    proxy = free_port()
    cmd = [*launcher, "--data", str(data), "--proxy-port", str(proxy)]
    for name in _STANDALONE_PORTS:
        cmd += [f"--{name}-port", str(free_port())]
    return cmd, f"http://127.0.0.1:{proxy}"


class MilvusStandalone:
    """A running standalone server: its URI, and the kill -9, pause (SIGSTOP) and restart on the same ports
    with the same data that tests/app/bundles/test_milvus_failures.py does to it."""

    def __init__(self, folder: Path, proc: subprocess.Popen[bytes], uri: str, timeout_s: float):
        self.folder, self.proc, self.uri, self.timeout_s = folder, proc, uri, timeout_s
        self.data = folder / "data"  # the launcher's base dir: bin/milvus, configs/milvus.yaml, data/

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)  # launcher and server: started in their own session

    def kill(self) -> None:
        """kill -9 of the whole server (no shutdown, what a crashed node or OOM kill leaves)."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def ensure_answering(self) -> None:
        """Back to a server that answers, whatever a test left: resumed if paused, restarted if dead."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            _wait_answering(self.proc, self.uri, self.folder / "milvus-server.log", self.timeout_s)
        else:
            self.restart()

    def restart(self, wait: bool = True) -> None:
        """`bin/milvus run standalone` with the configuration the launcher wrote (same ports, same data):
        the launcher itself would first bind every port without SO_REUSEADDR, which fails while the
        killed server's sockets linger in TIME_WAIT."""
        env = dict(os.environ)  # what the launcher sets (milvus/__init__.py, MilvusServer.start)
        env |= {
            "DEPLOY_MODE": "STANDALONE",
            "METRICS_PORT": str(free_port()),
            "MILVUS_RUN_DIR": str(self.data / "run"),
            "LD_LIBRARY_PATH": ":".join([str(self.data / "bin"), env.get("LD_LIBRARY_PATH", "")]),
        }
        log = open(self.folder / "milvus-server.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [str(self.data / "bin" / "milvus"), "run", "standalone"],
            cwd=self.data,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        if wait:
            _wait_answering(self.proc, self.uri, self.folder / "milvus-server.log", self.timeout_s)


@contextmanager
def milvus_standalone_process(folder: Path, *, timeout_s: float = 420) -> Iterator[MilvusStandalone]:
    """The real Milvus standalone server (`milvus-server` of `pip install milvus==2.3.5`: embedded etcd, local
    storage; the proxy speaks the gRPC protocol of a cluster) on free 127.0.0.1 ports, data in `folder`;
    yields it once a client can list collections, else raises with the log's tail. Stopped at the end.

    One at a time on a machine: the embedded etcd's peer port (2380) is not among the ports it is given."""
    binary = Path(sys.executable).parent / "milvus-server"
    if not binary.exists() and shutil.which("milvus-server") is None:
        raise MilvusUnavailable(
            "milvus-server not installed (pip install .[milvus]); Milvus server tests not run"
        )
    launcher = str(binary if binary.exists() else shutil.which("milvus-server"))
    cmd, uri = standalone_command([launcher], folder / "data")
    log_path = folder / "milvus-server.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below, after the server stops
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = MilvusStandalone(folder, proc, uri, timeout_s)
    try:
        _wait_answering(proc, server.uri, log_path, timeout_s)
        yield server
    finally:
        if server.proc.poll() is None:
            server.signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        _stop(server.proc)
        log.close()


def _wait_answering(proc: subprocess.Popen[bytes], uri: str, log_path: Path, timeout_s: float) -> None:
    from pymilvus import MilvusClient

    end = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            if "cannot execute" in tail or "Exec format" in tail:
                raise MilvusUnavailable(f"milvus-server cannot run here: {tail[-300:]}")
            raise RuntimeError(f"milvus-server exited ({proc.returncode}): {tail}")
        try:
            MilvusClient(uri=uri, timeout=5).list_collections()
            return
        except Exception:  # not answering yet; the deadline below reports why
            if time.monotonic() > end:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"milvus-server did not answer in {timeout_s:.0f} s: {tail}") from None
        time.sleep(0.5)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL to whatever is left of it after 10 s: the launcher
    exits at once, the `milvus` binary it started kept running after a test session (seen here), and a
    restarted binary's graceful stop took over 30 s (test data: nothing to lose)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            os.killpg(proc.pid, 0)  # anyone left in the group?
        except ProcessLookupError:
            break
        proc.poll()  # reap the launcher, so the group empties
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
