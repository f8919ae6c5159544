"""How a server's worker processes share a burst of connections: each worker's connections and CPU, and the load's rate and p99.

    .venv/bin/python -m bench worker_balance [--bundles var/bundles] [--encoder auto] [--workers 2]
        [--starts 3] [--clients 32] [--seconds 6] [--layouts spread,shared]

Each layout is started --starts times (the layouts alternate, start by start), on the live bundle of
--bundles, query cache off; wrk opens --clients connections at once and drives the bundle's recorded
timing queries for --seconds. Halfway through, each worker process's established connections on the
port are counted (its socket descriptors matched against /proc/net/tcp and tcp6), and its CPU seconds
over the middle of the run are read from /proc. Layouts:

- spread: `python -m app.serve` with SEARCH_WORKERS=--workers (one SO_REUSEPORT socket per worker,
  app/worker_sockets.py);
- shared: `uvicorn --workers N --factory app.main:create_app`: the one socket uvicorn's workers share, what
  `python -m app.serve` ran before and what a user running uvicorn directly gets.

Both run --encoder with SEARCH_ENCODER_THREADS=1 unless the plan is asked for (`--threads 0`). Prints one
line a start, then the median req/s and p99 of each layout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness.paths import REPO
from bench.harness.ports import free_port
from bench.harness.profiling import stat_cpu_s
from bench.harness.servers import (
    APP,
    on_port,
    serve_cmd,
    service_env,
    settle_workers,
    start_server,
    stop_server,
    uvicorn_cmd,
)
from bench.harness.wrk import drive_wrk, live_query_bodies

TCP_ESTABLISHED = "01"
TCP_LISTEN = "0A"


def workers_of(launcher: int) -> list[int]:
    """The worker processes a launcher spawned (multiprocessing's spawned children; not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == launcher and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def socket_inodes(port: int, state: str = TCP_ESTABLISHED) -> set[str]:
    """Inodes of the TCP sockets in `state` (/proc/net/tcp's hex code) whose local port is `port`, IPv4 and IPv6."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == state:
                inodes.add(fields[9])
    return inodes


def connections_of(pid: int, inodes: set[str]) -> int:
    """How many of those connections `pid` holds a descriptor of."""
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            held += 1
    return held


def one_start(layout: str, args: argparse.Namespace, bodies: Path) -> dict[str, Any]:
    port = free_port()
    extra = {"SEARCH_QUERY_CACHE_SIZE": "0", "SEARCH_WORKERS": str(args.workers)}
    if args.threads:
        extra["SEARCH_ENCODER_THREADS"] = str(args.threads)
    env = service_env(args.bundles, args.encoder, True, **extra)
    env.pop("OMP_NUM_THREADS", None)
    cmd = serve_cmd(port) if layout == "spread" else on_port(uvicorn_cmd(APP, 0, workers=args.workers), port)
    started = time.perf_counter()
    proc = start_server(cmd, env, port)
    try:
        settle_workers(started)
        workers = workers_of(proc.pid)
        result: dict[str, Any] = {}
        load = threading.Thread(
            target=lambda: result.update(
                drive_wrk(f"http://127.0.0.1:{port}/search", bodies, args.clients, args.seconds, 0)
            )
        )
        load.start()
        time.sleep(args.seconds / 4)
        cpu0 = {w: stat_cpu_s(f"/proc/{w}/stat") for w in workers}
        time.sleep(args.seconds / 2)
        cpu1 = {w: stat_cpu_s(f"/proc/{w}/stat") for w in workers}
        inodes = socket_inodes(port)
        conns = [connections_of(w, inodes) for w in workers]
        load.join()
    finally:
        stop_server(proc)
    span = args.seconds / 2
    return result | {"connections": conns, "cpu": [(cpu1[w] - cpu0[w]) / span for w in workers]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundles", type=Path, default=REPO / "var" / "bundles")
    parser.add_argument("--encoder", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="SEARCH_ENCODER_THREADS (0: the plan's)")
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--layouts", default="spread,shared")
    args = parser.parse_args(argv)

    bodies = live_query_bodies(args.bundles, "worker_balance_bodies.jsonl")
    layouts = [x for x in args.layouts.split(",") if x]
    print(
        f"{args.bundles}: encoder {args.encoder}, {args.workers} workers x {args.threads or 'planned'} thread(s), "
        f"wrk {args.clients} connections for {args.seconds:.0f} s; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows: dict[str, list[dict[str, Any]]] = {x: [] for x in layouts}
    for start in range(args.starts):
        for layout in layouts:
            r = one_start(layout, args, bodies)
            rows[layout].append(r)
            cpu = " / ".join(f"{c:.2f}" for c in r["cpu"])
            conns = " / ".join(str(c) for c in r["connections"])
            print(
                f"  start {start + 1} {layout:6s} connections per worker {conns:9s} CPU cores per worker {cpu:11s} "
                f"{r['qps']:7.1f} req/s  p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  errors {r['errors']}",
                flush=True,
            )
    for layout, rs in rows.items():
        print(
            f"{layout:6s} median of {len(rs)}: {statistics.median(r['qps'] for r in rs):7.1f} req/s, "
            f"p99 {statistics.median(r['p99_ms'] for r in rs):6.1f} ms"
        )


if __name__ == "__main__":
    main()
