"""A/B of two checkouts' servers on one bundle: the server CPU per /search request, sent alternately.

    git worktree add --detach ../before REV     # the checkout to compare against (any folder of this repo)
    OMP_NUM_THREADS=1 .venv/bin/python -m bench request_ab BUNDLES ../before . [--n 300] [--threads 1]

Each checkout's app is served by its own uvicorn process (PYTHONPATH = that checkout, the same venv, the
same bundles folder, query cache off, the `onnx-int8` encoder, micro-batching on) and gets the same
queries, one after another, in alternating order (A B, B A, ...), so load from other processes hits both
alike. Printed per checkout: CPU per request (utime + stime of every thread of the server, from /proc)
and the wall p50. On a shared machine the profile bench's two separate runs cannot resolve a 1 ms change
(bench/results/request_profile_demo.txt); this pairing can. One intra-op thread (`--threads 1`, the
default) keeps onnxruntime's spinning workers from billing the server for wall time.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import httpx

from bench.harness.ports import free_port
from bench.harness.servers import APP, service_env, uvicorn_cmd
from bench.serving.request_profile import cpu_seconds
from contract.bundles.bundle import read_manifest
from contract.encoding.query_encoders import timing_queries
from training.bundle.store import BundleStore

READY_TIMEOUT_S = 300
WARMUP = 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundles", type=Path, help="the bundles folder both servers serve")
    p.add_argument("checkouts", type=Path, nargs=2, help="two folders of this repository (before, after)")
    p.add_argument("--n", type=int, default=300, help="requests to each server")
    p.add_argument("--threads", type=int, default=1, help="SEARCH_ENCODER_THREADS of each server")
    return p.parse_args(argv)


def _wait_ready(url: str) -> None:
    end = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < end:
        try:
            if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} not ready in {READY_TIMEOUT_S} s")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    store = BundleStore(args.bundles)
    live = store.current_version()
    if live is None:
        raise SystemExit(f"{args.bundles}: no live bundle")
    queries = timing_queries(read_manifest(store.version_path(str(live))).extras) or ["how to open a file"]
    procs, urls = [], []
    try:
        for tree in args.checkouts:
            port = free_port()
            env = service_env(
                args.bundles, "onnx-int8", True, SEARCH_QUERY_CACHE_SIZE="0",
                PYTHONPATH=str(tree.resolve()), SEARCH_ENCODER_THREADS=str(args.threads),
                SEARCH_ENCODER_SPARE_CORES="false",  # CPU per request, not one query's wall time
            )  # fmt: skip
            out = subprocess.DEVNULL
            procs.append(subprocess.Popen(uvicorn_cmd(APP, port), cwd=tree, env=env, stdout=out, stderr=out))
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            _wait_ready(url)
        with httpx.Client(timeout=30) as client:
            for url in urls:
                for q in queries[:WARMUP]:
                    client.post(url + "/search", json={"query": q, "top_k": 10}).raise_for_status()
            before = [cpu_seconds(p.pid) for p in procs]
            walls: list[list[float]] = [[] for _ in urls]
            for i in range(args.n):
                order = [0, 1] if i % 2 == 0 else [1, 0]
                for j in order:
                    t0 = time.perf_counter()
                    r = client.post(
                        urls[j] + "/search", json={"query": queries[i % len(queries)], "top_k": 10}
                    )
                    r.raise_for_status()
                    walls[j].append(time.perf_counter() - t0)
            used = [cpu_seconds(p.pid) - b for p, b in zip(procs, before, strict=True)]
    finally:
        for p in procs:
            p.terminate()
            p.wait(60)
    print(f"request_ab: {args.n} requests each, alternated, {args.threads} encoder thread(s)")
    for tree, cpu, wall in zip(args.checkouts, used, walls, strict=True):
        wall.sort()
        p50 = wall[len(wall) // 2] * 1000
        print(f"{str(tree):40s} {cpu * 1000 / args.n:7.3f} ms CPU/request  wall p50 {p50:.2f} ms")


if __name__ == "__main__":
    main()
