"""The query encoder's spare-core session on and off: a served bundle's req/s, p50 and p99 at each client count.

    .venv/bin/python -m bench spare_cores [--bundles var/bundles] [--encoder onnx-int8] [--starts 2]
        [--clients 1,2,8,32] [--seconds 8]

`python -m app.serve` as a user starts it (the plan's workers, one intra-op thread each), on the live bundle
of --bundles, query cache off, with SEARCH_ENCODER_SPARE_CORES on and off, the two alternating start by start
(on, off, on, off, ...). Each start is driven by wrk at each --clients count in turn for --seconds with the
bundle's recorded timing queries. Prints each start's workers' RSS after a warm-up (the wide session holds
the query model once more), one line per start and client count (with the share of the
workers' encoder calls that ran on the wide session, from GET /bundles `serving.spare_cores`), then per
client count the median of each setting and the on/off ratios of each start's pair (req/s; p50 and p99,
lower is better). At 2 clients the kernel's hash puts both connections on one worker in about half the
starts, which a wide share near 100 % shows (with one each, the other worker is busy and it stays near 0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness.memory import status_bytes
from bench.harness.paths import REPO
from bench.harness.ports import free_port
from bench.harness.servers import serve_cmd, service_env, settle_workers, start_server, stop_server
from bench.harness.wrk import drive_wrk, live_query_bodies
from bench.processes.worker_balance import workers_of

SETTINGS = {"on": "true", "off": "false"}


def one_start(
    setting: str, args: argparse.Namespace, bodies: Path, clients: list[int]
) -> tuple[list[float], dict[int, dict]]:
    """The workers' RSS (MB) after a warm-up, and wrk's result at each client count."""
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
        rss = [status_bytes(str(w), "VmRSS") / 2**20 for w in workers_of(proc.pid)]
        out: dict[int, dict] = {}
        for c in clients:
            before = encoder_calls(port)
            out[c] = drive_wrk(url, bodies, c, args.seconds, 0)
            after = encoder_calls(port)
            calls = sum(after[w][0] - before.get(w, (0, 0))[0] for w in after)
            wide = sum(after[w][1] - before.get(w, (0, 0))[1] for w in after)
            out[c]["wide_share"] = wide / calls if calls else float("nan")
        return rss, out
    finally:
        stop_server(proc)


def wide_shown(run: dict[str, Any]) -> str:
    share = run["wide_share"]
    return "no wide session" if share != share else f"wide session {share:.0%} of encoder calls"  # nan: none


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
    """Per client count: each setting's medians, and the on/off ratios start by start (this machine's speed
    drifts by a quarter between starts, so only a start's pair compares like with like), with their median."""
    for c in clients:
        med = {
            s: {key: statistics.median(r[c][key] for r in runs) for key in ("qps", "p50_ms", "p99_ms")}
            for s, runs in rows.items()
        }
        line = "  ".join(
            f"{s} {m['qps']:7.1f} req/s p50 {m['p50_ms']:6.2f} p99 {m['p99_ms']:6.1f} ms"
            for s, m in med.items()
        )
        print(f"{c:3d} client(s), median of {len(next(iter(rows.values())))}: {line}", flush=True)
        if {"on", "off"} <= rows.keys():
            pairs = list(zip(rows["on"], rows["off"], strict=False))
            for key, name in (("qps", "req/s"), ("p50_ms", "p50"), ("p99_ms", "p99")):
                ratios = [on[c][key] / off[c][key] for on, off in pairs]
                shown = ", ".join(f"{r:.2f}" for r in ratios)
                print(f"      on/off {name:5s} by start: {shown}; median {statistics.median(ratios):.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundles", type=Path, default=REPO / "var" / "bundles")
    parser.add_argument("--encoder", default="onnx-int8")
    parser.add_argument("--starts", type=int, default=2, help="starts of each setting, alternated")
    parser.add_argument("--clients", default="1,2,8,32")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--settings", default="on,off")
    args = parser.parse_args(argv)

    bodies = live_query_bodies(args.bundles, "spare_cores_bodies.jsonl")
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
            rss, r = one_start(s, args, bodies, clients)
            rows[s].append(r)
            print(
                f"  start {start + 1} {s:3s} workers' RSS after warm-up: {' / '.join(f'{m:.0f}' for m in rss)} MB"
            )
            for c, run in r.items():
                print(
                    f"  start {start + 1} {s:3s} {c:3d} client(s): {run['qps']:7.1f} req/s  p50 {run['p50_ms']:6.2f} ms  "
                    f"p99 {run['p99_ms']:6.1f} ms  errors {run['errors']}  {wide_shown(run)}",
                    flush=True,
                )
    summary(rows, clients)


if __name__ == "__main__":
    main()
