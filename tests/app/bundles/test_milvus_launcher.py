"""The Milvus image's entrypoint (docker/milvus_launch.py) against the real server of PyPI's `milvus`: when the
Milvus process dies the launcher exits with its status, so the container exits and `restart:
unless-stopped` starts it again (the package's own launcher kept waiting: issue 46's known gap), and a
SIGTERM stops Milvus and exits 0.

Only one standalone server can run on a machine (its embedded etcd's peer port 2380 is fixed), so the
session's server (tests/conftest.py) is killed first and left answering again at the end, as the failure
tests do (tests/app/bundles/test_milvus_failures.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.milvus import group_pids, standalone_command

REPO = Path(__file__).resolve().parents[3]
LAUNCH = REPO / "docker" / "milvus_launch.py"
START_S = 420  # a first start unpacks the ~200 MB binary into the data folder; minutes on a loaded machine


@pytest.fixture
def no_other_server(milvus_standalone_server) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Yields a list for the launchers the test starts: whatever of them is left (a failed test) is killed
    with its server before the session's server starts again."""
    milvus_standalone_server.kill()
    launched: list[subprocess.Popen[bytes]] = []
    yield launched
    for proc in launched:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its server: a session of their own
        proc.wait(timeout=30)
    milvus_standalone_server.ensure_answering()


def _launch(
    cmd: list[str], uri: str, log: Path, launched: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[bytes], int]:
    """The entrypoint; returns it and the pid of the `milvus` process it started, once a client can list
    collections."""
    from pymilvus import MilvusClient

    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    launched.append(proc)
    end = time.monotonic() + START_S
    while True:
        assert proc.poll() is None, f"the launcher exited ({proc.returncode}): {log.read_text()[-2000:]}"
        try:
            MilvusClient(uri=uri, timeout=5).list_collections()
            break
        except Exception:  # not answering yet
            assert time.monotonic() < end, f"no answer in {START_S} s: {log.read_text()[-2000:]}"
            time.sleep(1)
    (server,) = [pid for pid in group_pids(proc.pid) if pid != proc.pid]  # its own session's group
    return proc, server


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.slow
def test_the_launcher_exits_with_a_dead_server_and_stops_it_on_sigterm(no_other_server, tmp_path):
    pytest.importorskip("milvus")
    from pymilvus import MilvusClient

    data, log = tmp_path / "milvus", tmp_path / "launch.log"

    cmd, uri = standalone_command([sys.executable, str(LAUNCH)], data)
    launcher, server = _launch(cmd, uri, log, no_other_server)
    MilvusClient(uri=uri, timeout=10).create_collection("kept", dimension=4)
    os.kill(server, signal.SIGKILL)  # an OOM kill, or Milvus exiting after its etcd session expired
    assert launcher.wait(timeout=30) == 128 + signal.SIGKILL, log.read_text()[-2000:]
    assert "the Milvus server exited (137)" in log.read_text()

    # what a container restart does: the same command, ports and data at once, while the killed server's
    # connections linger in TIME_WAIT on those ports
    launcher, server = _launch(cmd, uri, log, no_other_server)
    assert "kept" in MilvusClient(uri=uri, timeout=10).list_collections()
    launcher.send_signal(signal.SIGTERM)  # docker stop
    assert launcher.wait(timeout=60) == 0, log.read_text()[-2000:]
    deadline = time.monotonic() + 30
    while not _gone(server):
        assert time.monotonic() < deadline, f"the milvus process {server} outlived its launcher"
        time.sleep(0.5)
