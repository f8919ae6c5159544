"""Load benchmark of POST /search against a real uvicorn server on 127.0.0.1.

    flock "$HEAVY_LOCK" .venv/bin/python bench/load_bench.py [--bundles DIR] [--seconds 4]   # the shared heavy-job lock

Without --bundles it builds (once, cached under var/bench/, git-ignored) a bundle of the whole scifact
corpus (../shared/data/scifact) with the base all-MiniLM-L6-v2 and an exact (flat) index, plus its ONNX
query encoders with their measured nDCG@10 vs torch. Document vectors are computed with the ONNX fp32
export (cosine 1.0000 to torch, about 2x faster on this CPU), then written as the torch encoder's bundle.

First, in this process and without HTTP, it measures each encoder's per-query cost alone and in
32-query micro-batches: their ratio is the most micro-batching can gain on this CPU (it is the encoder
that batches; the HTTP layer costs the same per request either way).

Then for every (query encoder, micro-batching on/off) it starts `uvicorn --factory app.main:create_app`,
waits for /readyz, and drives closed-loop load at concurrency 1, 8 and 32: each client sends scifact
queries back to back, bounded by --seconds and --max-requests per cell, --repeat times per cell (the
median-throughput run is reported). The load generator is wrk (`apt-get install wrk`; C, one thread,
a few percent of a core) when installed, else an httpx client, which costs the server about a core at
high rates. Prints QPS and p50/p99 latency (client side, end to end) per cell and the micro-batching
speed-up at each concurrency. Client and server share the 2 cores, so absolute numbers are pessimistic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
CACHE = REPO / "var" / "bench"


def build_bundle_if_needed(bundles: Path, distractors: int = 0) -> str:
    from training.bundle import BundleStore

    store = BundleStore(bundles)
    if store.current_version():
        return store.current_version()  # type: ignore[return-value]
    from training.bundle import build_bundle
    from training.data import Document, load_beir
    from training.encoder import Encoder, default_model_path, document_text
    from training.onnx_encoder import OnnxQueryEncoder, attach_onnx, export_onnx

    print(f"building the scifact bench bundle in {bundles} (once)", flush=True)
    test = load_beir(SCIFACT, "test")
    base_onnx = CACHE / "base-onnx"
    if not (base_onnx / "onnx" / "model.onnx").exists():
        base_onnx.mkdir(parents=True, exist_ok=True)
        export_onnx(default_model_path(), base_onnx / "onnx", quantize=False)
        shutil.copy(default_model_path() / "tokenizer.json", base_onnx / "tokenizer.json")
    fast = OnnxQueryEncoder.load(base_onnx, variant="fp32")
    texts = [document_text(d.title, d.text) for d in test.corpus.values()]
    t0 = time.perf_counter()
    emb = np.concatenate([fast.encode(texts[i : i + 256], batch_size=32) for i in range(0, len(texts), 256)])
    print(f"encoded {len(texts)} documents in {time.perf_counter() - t0:.0f} s", flush=True)
    corpus = dict(test.corpus)
    if distractors:
        # a bigger exact index at no encoding cost: random unit vectors cost a flat scan what real ones do
        rng = np.random.default_rng(0)
        extra = rng.standard_normal((distractors, emb.shape[1])).astype(np.float32)  # (N, dim)
        extra /= np.linalg.norm(extra, axis=1, keepdims=True)
        emb = np.concatenate([emb, extra])
        for i in range(distractors):
            corpus[f"distractor-{i}"] = Document(f"distractor-{i}", "", f"synthetic distractor {i}", {})
    staging = CACHE / f"staging-{os.getpid()}"
    build_bundle(Encoder.load(), corpus, staging_dir=staging, doc_embeddings=emb, index_kind="flat")
    record = attach_onnx(staging, test.queries, test.qrels, quantize=True)
    print(f"ONNX quality (nDCG@10 on {record['n_queries']} test queries): {record['ndcg@10']}", flush=True)
    return store.publish(staging, force=True).version


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(bundles: Path, backend: str, microbatch: bool, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_ENCODER_BACKEND": backend,
        "SEARCH_MICROBATCH_ENABLED": "true" if microbatch else "false",
        "SEARCH_RELOAD_POLL_SECONDS": "0",
        "SEARCH_QUEUE_MAX": "4096",
        "SEARCH_LOG_LEVEL": "WARNING",
    }
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"uvicorn exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.terminate()
    raise SystemExit("server not ready after 180 s")


async def drive(url: str, queries: list[str], concurrency: int, seconds: float, max_requests: int) -> dict:
    latencies: list[float] = []
    errors = 0
    sent = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        for q in queries[:3]:  # warm-up
            await client.post("/search", json={"query": q, "top_k": 10})
        stop_at = time.perf_counter() + seconds

        async def worker(offset: int) -> None:
            nonlocal errors, sent
            i = offset
            while time.perf_counter() < stop_at and sent < max_requests:
                sent += 1
                t0 = time.perf_counter()
                r = await client.post("/search", json={"query": queries[i % len(queries)], "top_k": 10})
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


def write_wrk_bodies(queries: list[str]) -> Path:
    """One /search body per line, for bench/search_load.lua."""
    bodies = CACHE / "wrk_bodies.jsonl"
    bodies.parent.mkdir(parents=True, exist_ok=True)
    bodies.write_text("".join(json.dumps({"query": q, "top_k": 10}) + "\n" for q in queries))
    return bodies


def drive_wrk(
    url: str, queries: list[str], bodies: Path, concurrency: int, seconds: float, max_requests: int
) -> dict:
    """The same closed-loop load from wrk (C, one thread): far less client CPU taken from the server."""
    for q in queries[:3]:  # warm-up
        httpx.post(f"{url}/search", json={"query": q, "top_k": 10}, timeout=30)
    cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "30s"]
    cmd += ["-s", str(REPO / "bench" / "search_load.lua"), url]
    env = {**os.environ, "BODIES": str(bodies), "MAX_REQUESTS": str(max_requests)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    res = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    return {
        "n": res["requests"],
        "errors": res["non_2xx"] + res["socket_errors"],
        "qps": res["requests"] / (res["duration_us"] / 1e6),
        "p50_ms": res["p50_us"] / 1000,
        "p99_ms": res["p99_us"] / 1000,
    }


def median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (its latencies stay consistent with it), plus the spread."""
    ordered = sorted(runs, key=lambda r: r["qps"])
    mid = dict(ordered[len(ordered) // 2])
    mid["qps_runs"] = [round(r["qps"], 1) for r in runs]
    mid["errors"] = sum(r["errors"] for r in runs)
    return mid


def encoder_ceiling(bundles: Path, version: str, backend: str, queries: list[str]) -> dict:
    """In-process, no HTTP: ms per query of the per-request path vs 32-query micro-batches.

    Batches are encoded in length-sorted chunks of 8 and of 32 and the cheaper is kept. The ratio
    bounds what micro-batching can gain on this CPU for these queries: the HTTP layer costs the same
    per request either way.
    """
    from app.service import SearchSpec, open_live_bundle
    from training.bundle import load_bundle

    live = open_live_bundle(load_bundle(bundles / version), backend)

    def spec(q: str) -> SearchSpec:
        return SearchSpec(texts=[q], vectors=None, k=10)

    for q in queries[:5]:
        live.run(spec(q))
    single = []
    for q in queries[:200]:
        t0 = time.perf_counter()
        live.run(spec(q))
        single.append(time.perf_counter() - t0)
    per_chunk = {}
    for chunk in (8, 32):
        live.encode_batch_size = chunk
        batched = []
        for start in range(0, 320, 32):
            t0 = time.perf_counter()
            live.run_many([spec(q) for q in queries[start : start + 32]])
            batched.append((time.perf_counter() - t0) / 32)
        per_chunk[chunk] = float(np.median(batched)) * 1000
    one, many = float(np.median(single)) * 1000, min(per_chunk.values())
    return {"backend": backend, "single_ms": one, "batched_ms_per_query": many, "ceiling": one / many}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundles", type=Path, default=None, help="bundles folder with a live bundle")
    parser.add_argument(
        "--distractors",
        type=int,
        default=0,
        help="add this many random unit-vector documents to the built bundle's exact index (0 = scifact only), "
        "to see the regime where the FAISS scan, not the encoder, dominates",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each cell")
    parser.add_argument("--max-requests", type=int, default=5000, help="request cap of each cell")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per cell; the table shows the median-throughput run"
    )
    parser.add_argument("--backends", default="torch,onnx,onnx-int8")
    parser.add_argument(
        "--client",
        choices=["auto", "wrk", "httpx"],
        default="auto",
        help="load generator: wrk when installed (apt-get install wrk), else httpx (costs the server CPU)",
    )
    parser.add_argument("--out", type=Path, default=CACHE / "load_bench.json")
    args = parser.parse_args()

    from training.data import load_queries

    bundles = args.bundles or CACHE / ("bundles" if not args.distractors else f"bundles-{args.distractors}")
    version = build_bundle_if_needed(bundles, args.distractors)
    queries = list(load_queries(SCIFACT / "queries.jsonl").values())
    levels = [int(c) for c in args.concurrency.split(",")]
    client = args.client if args.client != "auto" else ("wrk" if shutil.which("wrk") else "httpx")
    if client == "wrk" and not shutil.which("wrk"):
        raise SystemExit("--client wrk: wrk is not installed (apt-get install wrk)")
    print(f"load generator: {client}", flush=True)
    bodies = write_wrk_bodies(queries) if client == "wrk" else None
    ceilings = []
    for backend in args.backends.split(","):
        ceilings.append(encoder_ceiling(bundles, version, backend, queries))
        c = ceilings[-1]
        print(
            f"{backend:10s} in-process: one query {c['single_ms']:.2f} ms, in batches of 32 "
            f"{c['batched_ms_per_query']:.2f} ms/query -> micro-batching can gain at most {c['ceiling']:.2f}x",
            flush=True,
        )
    rows = []
    for backend in args.backends.split(","):
        for microbatch in (True, False):
            port = free_port()
            proc = start_server(bundles, backend, microbatch, port)
            try:
                for c in levels:
                    url = f"http://127.0.0.1:{port}"
                    runs = []
                    for _ in range(args.repeat):
                        if bodies is not None:
                            runs.append(drive_wrk(url, queries, bodies, c, args.seconds, args.max_requests))
                        else:
                            runs.append(asyncio.run(drive(url, queries, c, args.seconds, args.max_requests)))
                    res = median_run(runs)
                    rows.append(
                        {
                            "backend": backend,
                            "microbatch": microbatch,
                            "concurrency": c,
                            "client": client,
                            **res,
                        }
                    )
                    r = rows[-1]
                    print(
                        f"{backend:10s} batch={'on ' if microbatch else 'off'} c={c:<3d} "
                        f"{r['qps']:8.1f} req/s  p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:8.2f} ms  "
                        f"n={r['n']} errors={r['errors']}",
                        flush=True,
                    )
            finally:
                proc.terminate()
                proc.wait(timeout=30)

    print(f"\nbundle {version}\n")
    print("| encoder | micro-batching | c | req/s (median) | req/s runs | p50 ms | p99 ms | errors |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['backend']} | {'on' if r['microbatch'] else 'off'} | {r['concurrency']} | {r['qps']:.1f} | "
            f"{' / '.join(str(q) for q in r['qps_runs'])} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} |"
        )
    print("\nmicro-batching speed-up (req/s on / off):")
    for backend in args.backends.split(","):
        for c in levels:
            on = [r for r in rows if r["backend"] == backend and r["microbatch"] and r["concurrency"] == c]
            off = [
                r for r in rows if r["backend"] == backend and not r["microbatch"] and r["concurrency"] == c
            ]
            if on and off:
                print(f"  {backend:10s} c={c:<3d} {on[0]['qps'] / off[0]['qps']:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"version": version, "ceilings": ceilings, "rows": rows}, indent=2))
    print(f"\nraw results: {args.out}")


if __name__ == "__main__":
    main()
