"""The Milvus image's entrypoint: PyPI `milvus`'s own launcher (`milvus-server`, same arguments), except that
it exits when the Milvus server process does, and stops the server on SIGTERM as on SIGINT.

Why: in milvus 2.3.5 the launcher waits while `server_proc is not None`, which stays true after the server
has died, so a crashed Milvus (an OOM kill, or the data node's etcd session expiring after a 30 s pause,
docs/deploy.md) left a container that was unhealthy but running, and `restart: unless-stopped` never
restarted it. Exiting with the server's status hands the restart to the engine; the API recovers by
itself once Milvus answers again (tests/app/bundles/test_milvus_failures.py). It has no SIGTERM handler
either, so `docker stop` left the server to the engine's SIGKILL. tests/app/bundles/test_milvus_launcher.py runs it.

    python milvus_launch.py --data /var/lib/milvus --proxy-port 19530
"""

from __future__ import annotations

import signal
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


def main() -> None:
    milvus.MilvusServer.wait = _wait_for_the_server  # type: ignore[method-assign]
    # the launcher installs its SIGINT handler inside main(); SIGTERM (docker stop, Kubernetes) does the same
    signal.signal(signal.SIGTERM, lambda _sig, _frame: milvus.default_server.stop())
    milvus.main()


if __name__ == "__main__":
    main()
