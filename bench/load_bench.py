"""Load benchmark of POST /search against a real uvicorn server on 127.0.0.1.

    flock "$HEAVY_LOCK" .venv/bin/python bench/load_bench.py [--bundles DIR] [--seconds 4]   # the shared heavy-job lock

Without --bundles it builds (once, cached under var/bench/, git-ignored) a bundle of the whole scifact
corpus (../shared/data/scifact) with the base all-MiniLM-L6-v2 and an exact (flat) index, plus its ONNX
query encoders with their measured nDCG@10 vs torch. Document vectors are computed with the ONNX fp32
export (cosine 1.0000 to torch, about 2x faster on this CPU), then written as the torch encoder's bundle.

For every (query encoder, micro-batching on/off) it starts `uvicorn --factory app.main:create_app`,
waits for /readyz, then drives closed-loop load with httpx at concurrency 1, 8 and 32: each client sends
scifact test queries back to back, bounded by --seconds and --max-requests per cell. Prints QPS and
p50/p99 latency (client side, end to end) per cell and the micro-batching speed-up at each concurrency.
The load generator shares the 2 cores with the server, so absolute numbers are pessimistic.
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


def build_bundle_if_needed(bundles: Path) -> str:
    from training.bundle import BundleStore

    store = BundleStore(bundles)
    if store.current_version():
        return store.current_version()  # type: ignore[return-value]
    from training.bundle import build_bundle
    from training.data import load_beir
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
    staging = CACHE / f"staging-{os.getpid()}"
    build_bundle(Encoder.load(), test.corpus, staging_dir=staging, doc_embeddings=emb, index_kind="flat")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundles", type=Path, default=None, help="bundles folder with a live bundle")
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each cell")
    parser.add_argument("--max-requests", type=int, default=5000, help="request cap of each cell")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--backends", default="torch,onnx,onnx-int8")
    parser.add_argument("--out", type=Path, default=CACHE / "load_bench.json")
    args = parser.parse_args()

    from training.data import load_queries

    bundles = args.bundles or CACHE / "bundles"
    version = build_bundle_if_needed(bundles)
    queries = list(load_queries(SCIFACT / "queries.jsonl").values())
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    for backend in args.backends.split(","):
        for microbatch in (True, False):
            port = free_port()
            proc = start_server(bundles, backend, microbatch, port)
            try:
                for c in levels:
                    res = asyncio.run(
                        drive(f"http://127.0.0.1:{port}", queries, c, args.seconds, args.max_requests)
                    )
                    rows.append({"backend": backend, "microbatch": microbatch, "concurrency": c, **res})
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
    print("| encoder | micro-batching | c | req/s | p50 ms | p99 ms | errors |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['backend']} | {'on' if r['microbatch'] else 'off'} | {r['concurrency']} | {r['qps']:.1f} | "
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
    args.out.write_text(json.dumps({"version": version, "rows": rows}, indent=2))
    print(f"\nraw results: {args.out}")


if __name__ == "__main__":
    main()
