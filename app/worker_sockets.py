"""One listening socket per worker process (SO_REUSEPORT), so the kernel spreads connections over the workers.

uvicorn's `--workers N` binds one socket in the parent and every worker listens on that same socket. Each
worker's event loop (uvloop's libuv, like asyncio's) accepts every queued connection when it wakes, so a
burst of new connections (a client's pool opening, a load balancer reconnecting) goes to whichever worker
woke first. Measured with 2 workers and wrk opening 32 connections (bench/processes/worker_balance.py,
bench/results/worker_balance.txt): 0/32, 28/4 and 0/32 connections per worker in three starts on the
shared socket, 16/16, 14/18 and 19/13 with a socket each; 2,434 against 4,453 req/s (medians), p99 19.9
against 12.8 ms.

With SO_REUSEPORT every worker listens on a socket of its own, bound to the same address; the kernel
hashes each new connection to one of them (by its addresses and ports), so a burst splits about evenly
and no worker drains the others' share. A worker that dies takes its socket with it and new connections
go to the others until it is replaced. The parent keeps the first socket bound, never listening, to hold
the port (an unbound port could be taken meanwhile; a bound socket that does not listen gets no share).

Used by `python -m app.serve` when it runs more than one worker on a TCP address (a Unix socket or an
inherited descriptor keep uvicorn's shared socket).
"""

from __future__ import annotations

import socket

from uvicorn import Config
from uvicorn.supervisors import multiprocess


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT (and SO_REUSEADDR, as uvicorn binds), not listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def on_tcp(config: Config) -> bool:
    """Whether the server listens on a host and port (split per worker), not a Unix socket or an inherited
    descriptor (uvicorn's shared socket kept): the supervisor and its workers must agree on it."""
    return config.uds is None and config.fd is None


class OwnSocketProcess(multiprocess.Process):
    """A uvicorn worker that listens on a socket of its own: it closes the parent's (never listened on)
    and serves on a new SO_REUSEPORT socket bound to the same address."""

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover - in the worker
        if not on_tcp(self.config):
            super().target(sockets)  # uvicorn's shared socket, as ever
            return
        for inherited in sockets or []:
            inherited.close()
        super().target([reuse_port_socket(self.config.host, self.config.port)])


class SpreadMultiprocess(multiprocess.Multiprocess):
    """uvicorn's supervisor (restarts, signals, health checks unchanged) with one socket per worker.

    `sockets` is uvicorn's one bound socket; on a TCP address it is replaced by an SO_REUSEPORT one bound
    to the same port (the port uvicorn chose, when it was 0), which the workers' own sockets then join."""

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        if on_tcp(config) and len(sockets) == 1:
            port = sockets[0].getsockname()[1]
            sockets[0].close()
            sockets = [reuse_port_socket(config.host, port)]
            config.port = port  # the workers bind this one (pickled to them at start)
        super().__init__(config, sockets)


def spread_connections() -> None:
    """Make `uvicorn.main.run`'s `--workers N` branch use SpreadMultiprocess, whose workers each listen on
    their own socket. Only the launcher process (`python -m app.serve`) calls this: it runs nothing else."""
    import uvicorn.main

    uvicorn.main.Multiprocess = SpreadMultiprocess  # type: ignore[attr-defined]
    multiprocess.Process = OwnSocketProcess  # type: ignore[misc]  # the name Multiprocess builds workers with
