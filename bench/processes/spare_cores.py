"""The query encoder's spare-core session on and off: a served bundle's req/s, p50 and p99 at each client count.

    .venv/bin/python -m bench spare_cores [--bundles var/bundles] [--encoder onnx-int8] [--starts 2]
        [--clients 1,2,8,32] [--seconds 8]

`python -m app.serve` as a user starts it (the plan's workers, one intra-op thread each), on the live bundle
of --bundles, query cache off, with SEARCH_ENCODER_SPARE_CORES on and off, the two alternating start by start
(on, off, on, off, ...). Each start is driven by wrk at each --clients count in turn for --seconds with the
bundle's recorded timing queries. Prints one line per start and client count (with the share of the
workers' encoder calls that ran on the wide session, from GET /bundles `serving.spare_cores`), then per
client count the median of each setting and on/off ratios (req/s; p50 and p99, lower is better).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness.paths import REPO
from bench.harness.ports import free_port
from bench.harness.profiling import live_timing_queries
from bench.harness.servers import serve_cmd, service_env, settle_workers, start_server, stop_server
from bench.harness.wrk import drive_wrk, write_wrk_bodies

SETTINGS = {"on": "true", "off": "false"}


def one_start(setting: str, args: argparse.Namespace, bodies: Path, clients: list[int]) -> dict[int, dict]:
    port = free_port()
    env = service_env(
        args.bundles,
        args.encoder,
        True,
        SEARCH_QUERY_CACHE_SIZE="0",
        SEARCH_ENCODER_SPARE_CORES=SETTINGS[setting],
    )
    env.pop("OMP_NUM_THREADS", None)  # the launcher sets it from its plan
    started = time.perf_counter()
    proc = start_server(serve_cmd(port), env, port)
    try:
        settle_workers(started)
        url = f"http://127.0.0.1:{port}/search"
        drive_wrk(url, bodies, 4, 2.0, 0)  # warm-up: every worker's first queries
        out = {}
        for c in clients:
            before = encoder_calls(port)
            out[c] = drive_wrk(url, bodies, c, args.seconds, 0)
            after = encoder_calls(port)
            calls = sum(after[w][0] - before.get(w, (0, 0))[0] for w in after)
            wide = sum(after[w][1] - before.get(w, (0, 0))[1] for w in after)
            out[c]["wide_share"] = wide / calls if calls else float("nan")
        return out
    finally:
        stop_server(proc)


def encoder_calls(port: int, tries: int = 24) -> dict[int, tuple[int, int]]:
    """Each worker's (encoder calls, wide calls) since load, from GET /bundles over new connections (the
    kernel hashes each to a worker, so a couple of dozen reach every worker of a few)."""
    seen: dict[int, tuple[int, int]] = {}
    for _ in range(tries):
        serving = httpx.get(f"http://127.0.0.1:{port}/bundles", timeout=10).json()["serving"]
        usage = serving.get("spare_cores") or {}
        seen[serving["pid"]] = (usage.get("calls", 0), usage.get("wide_calls", 0))
    return seen


def summary(rows: dict[str, list[dict[int, dict]]], clients: list[int]) -> None:
    for c in clients:
        med: dict[str, dict[str, float]] = {
            s: {key: statistics.median(r[c][key] for r in runs) for key in ("qps", "p50_ms", "p99_ms")}
            for s, runs in rows.items()
        }
        line = "  ".join(
            f"{s} {m['qps']:7.1f} req/s p50 {m['p50_ms']:6.2f} p99 {m['p99_ms']:6.1f} ms"
            for s, m in med.items()
        )
        ratio = ""
        if {"on", "off"} <= med.keys():
            on, off = med["on"], med["off"]
            ratio = (
                f"  on/off: req/s {on['qps'] / off['qps']:.2f}x, p50 {on['p50_ms'] / off['p50_ms']:.2f}x, "
                f"p99 {on['p99_ms'] / off['p99_ms']:.2f}x"
            )
        print(f"{c:3d} client(s), median of {len(next(iter(rows.values())))}: {line}{ratio}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundles", type=Path, default=REPO / "var" / "bundles")
    parser.add_argument("--encoder", default="onnx-int8")
    parser.add_argument("--starts", type=int, default=2, help="starts of each setting, alternated")
    parser.add_argument("--clients", default="1,2,8,32")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--settings", default="on,off")
    args = parser.parse_args(argv)

    queries = live_timing_queries(args.bundles)
    if not queries:
        raise SystemExit(f"{args.bundles}: the live bundle records no timing queries")
    bodies = write_wrk_bodies(queries, "spare_cores_bodies.jsonl")
    clients = [int(c) for c in args.clients.split(",")]
    settings = [s for s in args.settings.split(",") if s]
    print(
        f"{args.bundles}: encoder {args.encoder}, python -m app.serve's plan, wrk {args.seconds:.0f} s a level; "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows: dict[str, list[dict[int, Any]]] = {s: [] for s in settings}
    for start in range(args.starts):
        for s in settings:
            r = one_start(s, args, bodies, clients)
            rows[s].append(r)
            for c, run in r.items():
                print(
                    f"  start {start + 1} {s:3s} {c:3d} client(s): {run['qps']:7.1f} req/s  p50 {run['p50_ms']:6.2f} ms  "
                    f"p99 {run['p99_ms']:6.1f} ms  errors {run['errors']}  wide session {run['wide_share']:.0%} of encoder calls",
                    flush=True,
                )
    summary(rows, clients)


if __name__ == "__main__":
    main()
