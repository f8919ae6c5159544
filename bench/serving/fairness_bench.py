"""Single-query latency beside clients that send the biggest requests, over HTTP (app/engine/token_slicing.py).

    flock "$BENCH_LOCK" .venv/bin/python -u -m bench fairness_bench [--docs 300] [--n 60] [--backend onnx-int8]
        [--workers 2] [--modes fair,whole] [--out bench/results/fairness_bench.txt]

Builds (once, cached under var/bench/, git-ignored) a bundle of the first --docs scifact documents with
the base all-MiniLM-L6-v2 and a flat index, then, per mode, starts the real server (uvicorn, --workers
replicas with one intra-op thread each, as a 2-replica deployment on this 2-core box runs, micro-batching
on, query cache off: the same texts repeat) and measures single-query POST /search latency:

- unloaded: --n single-query searches (scifact test queries) one after another;
- loaded:   the same, while 1 or 2 big clients (each its own process, so their JSON decoding does not share
            the measuring client's interpreter) send, back to back, one of two request shapes:
            `256 short`: `queries` of 256 scifact queries (SEARCH_MAX_BATCH raised to 256, the size reported
            in issue 43 item 7); `16 long`: 16 scifact abstracts of 256 tokens, the most the default
            token budget (4,096) admits.

Modes: `fair` (the defaults: slices by tokens and by queries, single queries ahead of slices) and `whole`
(slicing off: one slice of any size). Prints p50/p99 per cell and the loaded p99 over the unloaded p99 of
the same mode; the target is at most 2x. Client and server share the CPU, so absolute numbers are
pessimistic; the ratio is the result.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from pathlib import Path

import httpx
import numpy as np

from bench.harness.paths import CACHE, require_scifact
from bench.harness.ports import free_port
from bench.harness.servers import APP, service_env, start_server, stop_server, uvicorn_cmd
from contract.jobs.plan import IndexPlan
from training.bundle.build import BuildOptions

MODES = {  # SEARCH_* settings per mode
    "fair": {},
    "whole": {"SEARCH_FAIR_SLICE_TOKENS": "1000000", "SEARCH_FAIR_SLICE_QUERIES": "100000"},
}


def bundle(n_docs: int) -> Path:
    from contract.encoding.encoder import Encoder
    from training.bundle.build import build_bundle
    from training.bundle.store import BundleStore
    from training.data.beir import load_corpus

    bundles = CACHE / f"fairness-bundles-{n_docs}"
    store = BundleStore(bundles)
    if store.current_version():
        return bundles
    print(f"building a {n_docs}-document scifact bundle in {bundles} (once)", flush=True)
    corpus = dict(list(load_corpus(require_scifact() / "corpus.jsonl").items())[:n_docs])
    with store.build_dir() as staging:
        build_bundle(
            Encoder.load(),
            corpus,
            staging_dir=staging,
            build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
        )
        store.publish(staging, force=True)
    return bundles


def shapes() -> tuple[list[str], dict[str, dict]]:
    """The single queries (scifact test queries) and the big request bodies (other scifact texts)."""
    from training.data.beir import load_corpus, load_queries

    queries = list(load_queries(require_scifact() / "queries.jsonl").values())
    abstracts = [d.text for d in list(load_corpus(require_scifact() / "corpus.jsonl").values())[:200]]
    long = [t[:2048] for t in abstracts if len(t) > 1500][:16]
    bigs = {
        "256 short": {"queries": queries[-256:], "top_k": 10},
        "16 long": {"queries": long, "top_k": 10},
    }
    return queries[:300], bigs


def big_client(url: str, body: dict, stop, done) -> None:  # type: ignore[no-untyped-def]
    """One big client: the same request back to back until `stop` (a process of its own)."""
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            r = client.post(url, json=body)
            assert r.status_code == 200, r.text[:500]
            with done.get_lock():
                done.value += 1


def measure(url: str, queries: list[str], big: dict | None, clients: int) -> tuple[list[float], int]:
    """Single-query latencies (ms) while `clients` processes send `big` back to back; big requests done."""
    ctx = mp.get_context("spawn")
    stop, done = ctx.Event(), ctx.Value("i", 0)
    procs = [
        ctx.Process(target=big_client, args=(url, big, stop, done)) for _ in range(clients if big else 0)
    ]
    for p in procs:
        p.start()
    if procs:
        deadline = time.monotonic() + 120
        while done.value < len(procs) and time.monotonic() < deadline:  # every big client is running
            time.sleep(0.05)
    times = []
    with httpx.Client(timeout=120) as client:
        for q in queries:
            t0 = time.perf_counter()
            r = client.post(url, json={"query": q, "top_k": 10})
            times.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200, r.text[:500]
    stop.set()
    for p in procs:
        p.join(timeout=120)
    return times, done.value


def run_mode(
    mode: str, bundles: Path, args: argparse.Namespace, queries: list[str], bigs: dict
) -> list[tuple]:
    port = free_port()
    env = service_env(
        bundles,
        args.backend,
        True,
        SEARCH_MAX_BATCH="256",
        SEARCH_MAX_REQUEST_TOKENS="8192",  # 256 scifact queries are ~5,900 tokens
        SEARCH_QUERY_CACHE_SIZE="0",
        SEARCH_ENCODER_THREADS="1" if args.workers > 1 else "0",
        **MODES[mode],
    )
    proc = start_server(uvicorn_cmd(APP, port, workers=args.workers), env, port)
    url = f"http://127.0.0.1:{port}/search"
    rows = []
    try:
        for body in bigs.values():  # warm-up: both shapes, every replica (connections spread over them)
            measure(url, queries[:10], body, args.workers)
        u50, u99 = percentiles(measure(url, queries[: args.n], None, 0)[0])
        rows.append((mode, "-", 0, u50, u99, 1.0, 0))
        print(_row(rows[-1]), flush=True)
        for shape, body in bigs.items():
            for clients in (1, 2):
                times, n_big = measure(url, queries[: args.n], body, clients)
                p50, p99 = percentiles(times)
                rows.append((mode, shape, clients, p50, p99, p99 / u99, n_big))
                print(_row(rows[-1]), flush=True)
    finally:
        stop_server(proc)
    return rows


def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


HEADER = f"{'mode':<6} {'big shape':<10} {'bigs':>4} {'p50 ms':>8} {'p99 ms':>8} {'p99 / idle':>10} {'big reqs':>8}"


def _row(r: tuple) -> str:
    mode, shape, clients, p50, p99, ratio, n_big = r
    return f"{mode:<6} {shape:<10} {clients:>4} {p50:8.1f} {p99:8.1f} {ratio:9.2f}x {n_big:8d}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--n", type=int, default=60, help="single-query requests per cell")
    parser.add_argument("--backend", default="onnx-int8", help="SEARCH_ENCODER_BACKEND (torch: the slowest)")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers (replicas)")
    parser.add_argument("--modes", default="fair,whole")
    parser.add_argument("--out", type=Path, help="also append the table to this file")
    args = parser.parse_args(argv)

    bundles = bundle(args.docs)
    queries, bigs = shapes()
    title = (
        f"# {args.backend}, {args.workers} worker(s), {args.docs} docs, {args.n} single queries per cell; "
        f"idle p99 is the unloaded cell's (row bigs 0)"
    )
    print(title + "\n" + HEADER, flush=True)
    rows = [r for mode in args.modes.split(",") for r in run_mode(mode, bundles, args, queries, bigs)]
    table = "\n".join([title, HEADER, *map(_row, rows)])
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write(table + "\n\n")


if __name__ == "__main__":
    main()
