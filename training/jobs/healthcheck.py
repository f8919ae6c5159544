"""Worker container healthcheck: `python -m training.jobs.healthcheck --queue URL`.

Exit 0 when (1) a `python -m training worker` process is running (not stopped) and (2) the
queue it consumes answers: the SQLite file opens and reads, or Redis answers PING. Exit 1 otherwise,
with one line saying which. Standard library only (no huey, redis client, pydantic or torch), so a probe
every 30 s costs milliseconds; `training/__init__.py` and `training/jobs/__init__.py` stay import-free.

What it cannot see: a worker thread that is alive but wedged while idle. The worker has no idle
heartbeat yet; a *running* job's heartbeat is watched by the worker's own dead-job sweeper and by every
reader of the job records (training/jobs/worker.py), which fail the job after the heartbeat timeout.
"""

from __future__ import annotations

import argparse
import socket
import sqlite3
import ssl
import sys
import urllib.parse
from contextlib import closing
from pathlib import Path

PROC = Path("/proc")
WORKER_ARGS = ("training", "worker")  # argv of `python -m training worker`


def _argv(pid_dir: Path) -> list[str]:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:  # the process ended while we looked
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _state(pid_dir: Path) -> str:
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return "?"
    # "pid (comm) S ...": comm may contain spaces and parentheses, so split after the last ')'.
    return stat.rsplit(")", 1)[-1].split()[0]


def is_worker(argv: list[str]) -> bool:
    """`python -m training worker [...]` (any python binary, options allowed after `worker`)."""
    for i in range(len(argv) - 2):
        if argv[i] == "-m" and argv[i + 1] == WORKER_ARGS[0] and argv[i + 2] == WORKER_ARGS[1]:
            return True
    return False


def find_worker(proc: Path = PROC) -> tuple[bool, str]:
    """Look for a running worker among /proc entries (Linux, as in the image).

    A dead worker has no entry to find: its cmdline is empty once it is a zombie, and in the container
    its exit ends the container anyway. What remains to catch is a worker that is absent (wrong command)
    or stopped (SIGSTOP, a debugger).
    """
    if not proc.is_dir():
        return False, "no /proc: cannot look for the worker process on this system"
    stopped = []
    for pid_dir in sorted(proc.iterdir(), key=lambda p: p.name):
        if not pid_dir.name.isdigit() or not is_worker(_argv(pid_dir)):
            continue
        state = _state(pid_dir)
        if state in ("T", "t"):
            stopped.append(pid_dir.name)
            continue
        return True, f"worker process {pid_dir.name} alive (state {state})"
    if stopped:
        return False, f"worker process {', '.join(stopped)} is stopped"
    return False, "no `python -m training worker` process is running"


def _check_sqlite(url: str, timeout: float) -> tuple[bool, str]:
    path = Path(url.removeprefix("sqlite:///"))
    if not path.exists():
        return False, f"queue file {path} does not exist (the worker creates it when it starts)"
    try:
        # Read-only, so a probe never creates or locks the queue for writing.
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)) as conn:
            tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    except sqlite3.Error as exc:
        return False, f"queue file {path} cannot be read: {exc}"
    return True, f"queue {path} readable ({tables} tables)"


def _resp(*words: str) -> bytes:
    """A Redis command in RESP (the protocol is just length-prefixed strings)."""
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        data = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _check_redis(url: str, timeout: float) -> tuple[bool, str]:
    parsed = urllib.parse.urlsplit(url)
    where = parsed.path if parsed.scheme == "unix" else f"{parsed.hostname}:{parsed.port or 6379}"
    try:
        if parsed.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(parsed.path)
        else:
            sock = socket.create_connection((parsed.hostname or "localhost", parsed.port or 6379), timeout)
            if parsed.scheme == "rediss":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parsed.hostname)
        with sock:
            if parsed.password is not None:
                user = urllib.parse.unquote(parsed.username or "default")
                sock.sendall(_resp("AUTH", user, urllib.parse.unquote(parsed.password)))
                reply = sock.recv(256)
                if not reply.startswith(b"+OK"):
                    return False, f"redis {where} refused AUTH: {reply.decode('utf-8', 'replace').strip()}"
            sock.sendall(_resp("PING"))
            reply = sock.recv(256)
    except OSError as exc:
        return False, f"cannot reach redis {where}: {exc}"
    if not reply.startswith(b"+PONG"):
        return False, f"redis {where} answered {reply.decode('utf-8', 'replace').strip()!r} to PING"
    return True, f"redis {where} answers PING"


def check_queue(url: str, timeout: float) -> tuple[bool, str]:
    if url.startswith("sqlite:///"):
        return _check_sqlite(url, timeout)
    if url.startswith(("redis://", "rediss://", "unix://")):
        return _check_redis(url, timeout)
    return False, f"queue URL {url!r}: expected sqlite:///path/jobs.db or redis://host:port/db"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.jobs.healthcheck", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--queue", required=True, help="the worker's queue URL (same as SEARCH_QUEUE_URL)")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the queue (default 5)"
    )
    parser.add_argument(
        "--no-process-check", action="store_true", help="only check the queue (worker runs elsewhere)"
    )
    args = parser.parse_args(argv)
    checks = [] if args.no_process_check else [find_worker()]
    checks.append(check_queue(args.queue, args.timeout))
    healthy = all(ok for ok, _ in checks)
    print(("healthy: " if healthy else "unhealthy: ") + "; ".join(reason for _, reason in checks))  # noqa: T201
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
