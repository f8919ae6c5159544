"""The Milvus image's entrypoint: PyPI `milvus`'s own launcher (`milvus-server`, same arguments), except that
it exits when the Milvus server process does, stops the server on SIGTERM as on SIGINT, and binds its
ports again right after a crash.

Why: in milvus 2.3.5 the launcher waits while `server_proc is not None`, which stays true after the server
has died, so a crashed Milvus (an OOM kill, or the data node's etcd session expiring after a 30 s pause,
docs/deploy.md) left a container that was unhealthy but running, and `restart: unless-stopped` never
restarted it. Exiting with the server's status hands the restart to the engine; the API recovers by
itself once Milvus answers again (tests/app/bundles/test_milvus_failures.py). It has no SIGTERM handler
either, so `docker stop` left the server to the engine's SIGKILL. And it checks each port by binding it
without SO_REUSEADDR, which fails while a killed server's connections linger in TIME_WAIT: the restart
then refused the proxy port it was given, or moved /healthz off 9091 (seen in make container-test). tests/app/bundles/test_milvus_launcher.py runs it.

    python milvus_launch.py --data /var/lib/milvus --proxy-port 19530
"""

from __future__ import annotations

import signal
import socket
import sys
import time
from typing import Any

import milvus

POLL_S = 0.5  # how soon a dead server is noticed; the health check's interval is 10 s


def _wait_for_the_server(server: Any) -> None:
    """Return once the server is stopped (by a signal: `stop()` clears `server_proc`) or has died; a death
    exits with the server's status (128 + the signal for a killed one), so the container exits too."""
    while (proc := server.server_proc) is not None:
        code = proc.poll()
        if code is not None and server.server_proc is proc:  # died, not stopped (stop() clears it first)
            code = 128 - code if code < 0 else code
            sys.stderr.write(f"milvus_launch: the Milvus server exited ({code}); exiting with it\n")
            sys.stderr.flush()
            sys.exit(code or 1)
        time.sleep(POLL_S)


def _try_bind_port(_config: Any, port: int) -> socket.socket | None:
    """The launcher's port check (bound and listening until it starts the server), with SO_REUSEADDR: a port
    another process listens on still fails, one left in TIME_WAIT by the server just killed does not."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen()
    except OSError:
        sock.close()
        return None
    return sock


def _alive(server: Any) -> bool:
    return server.server_proc is not None and server.server_proc.poll() is None


def _stop_and_exit(_sig: int, _frame: Any) -> None:
    milvus.default_server.stop()
    sys.exit(0)


def main() -> None:
    # `running` is what the launcher's start-up wait (up to 180 s for /healthz) loops on too: a server dead
    # before it answered ends that wait at once, and the death is then reported by the wait below
    milvus.MilvusServer.running = property(_alive)  # type: ignore[assignment,method-assign]
    milvus.MilvusServer.wait = _wait_for_the_server  # type: ignore[method-assign]
    milvus.MilvusServerConfig.try_bind_port = _try_bind_port  # type: ignore[method-assign]
    # docker stop, Kubernetes: stop the server and exit at once, wherever the launcher is (a stop in the
    # middle of its start-up would otherwise leave it printing a banner for a server that is gone)
    signal.signal(signal.SIGTERM, _stop_and_exit)
    milvus.main()


if __name__ == "__main__":
    main()
