"""The closed-loop load runners: wrk (bench/harness/search_load.lua) and its httpx fallback."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np

from bench.harness.paths import CACHE

LUA = Path(__file__).resolve().parent / "search_load.lua"


def write_wrk_bodies(
    queries: list[str], name: str = "wrk_bodies.jsonl", get: bool = False, extra: dict | None = None
) -> Path:
    """One /search body per line, with `extra`'s fields (or, `get`, one txtai GET path), for search_load.lua."""
    bodies = CACHE / name
    bodies.parent.mkdir(parents=True, exist_ok=True)
    if get:
        from urllib.parse import quote

        lines = [f"/search?query={quote(q)}&limit=10" for q in queries]
    else:
        lines = [json.dumps({"query": q, "top_k": 10} | (extra or {})) for q in queries]
    bodies.write_text("".join(line + "\n" for line in lines))
    return bodies


def live_query_bodies(bundles: Path, name: str) -> Path:
    """write_wrk_bodies of the timing queries the live bundle of `bundles` recorded; exits naming the folder
    when it records none."""
    from bench.harness.profiling import live_timing_queries

    queries = live_timing_queries(bundles)
    if not queries:
        raise SystemExit(f"{bundles}: the live bundle records no timing queries")
    return write_wrk_bodies(queries, name)


def drive_wrk(url: str, bodies: Path, concurrency: int, seconds: float, max_requests: int) -> dict:
    """The same closed-loop load from wrk (C, one thread): far less client CPU taken from the server."""
    cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "30s"]
    cmd += ["-s", str(LUA), url]
    env = {**os.environ, "BODIES": str(bodies), "MAX_REQUESTS": str(max_requests)}
    if "txtai" in bodies.name:
        env["METHOD"] = "GET"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    res = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    return {
        "n": res["requests"],
        "errors": res["non_2xx"] + res["socket_errors"],
        # a thread stopped at MAX_REQUESTS still reports the whole -d duration (wrk's main thread sleeps
        # through it), so a capped cell's rate is a lower bound: marked, and printed with ≥ (qps_shown)
        "capped": 0 < max_requests <= res["requests"],
        "qps": res["requests"] / (res["duration_us"] / 1e6),
        "p50_ms": res["p50_us"] / 1000,
        "p99_ms": res["p99_us"] / 1000,
    }


async def drive(
    url: str,
    queries: list[str],
    concurrency: int,
    seconds: float,
    max_requests: int,
    extra: dict | None = None,
) -> dict:
    """The httpx client's closed loop (when wrk is not installed; it costs the server CPU); `extra`'s
    fields join every body."""
    extra = extra or {}
    latencies: list[float] = []
    errors = 0
    sent = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        for q in queries[:3]:  # warm-up
            await client.post("/search", json={"query": q, "top_k": 10} | extra)
        stop_at = time.perf_counter() + seconds

        async def worker(offset: int) -> None:
            nonlocal errors, sent
            i = offset
            while time.perf_counter() < stop_at and sent < max_requests:
                sent += 1
                t0 = time.perf_counter()
                body = {"query": queries[i % len(queries)], "top_k": 10} | extra
                r = await client.post("/search", json=body)
                latencies.append(time.perf_counter() - t0)
                errors += r.status_code != 200
                i += concurrency

        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    lat = np.asarray(latencies) * 1000
    return {
        "n": len(lat),
        "errors": errors,
        "qps": len(lat) / elapsed,
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
    }


def qps_shown(run: dict) -> str:
    """The cell's req/s as printed: `≥` before a rate that MAX_REQUESTS cut short (drive_wrk)."""
    return f"{'≥' if run.get('capped') else ''}{run['qps']:.1f}"


def median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (its latencies stay consistent with it), plus the spread."""
    ordered = sorted(runs, key=lambda r: r["qps"])
    mid = dict(ordered[len(ordered) // 2])
    mid["qps_runs"] = [round(r["qps"], 1) for r in runs]
    mid["errors"] = sum(r["errors"] for r in runs)
    return mid
