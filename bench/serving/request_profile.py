"""Where one /search request's CPU goes: the encoder, the rest of the engine, and everything around them.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench request_profile [--bundles var/bundles] [--encoder onnx-int8]
        [--mode default] [--n 300] [--py-spy]

Three measurements of the same queries (the bundle's recorded evaluation queries), all in CPU time, so a
shared, loaded machine moves them far less than wall time:

1. in process, this process's CPU per query (every thread: onnxruntime's and FAISS's workers, spinning
   included, as in the server): the query encoder alone (`LiveBundle.encode`), and the whole engine answer
   (`LiveBundle.answer`: encode, vector and lexical search, fusion, hits, docstore);
2. a real server (uvicorn, one process, query cache off, micro-batching as configured), one client sending
   --n requests one after another: the server process's CPU per request (utime + stime of every thread,
   from /proc) and the wall p50;
3. `outside the engine` = 2 - 1's answer: what the HTTP server, the framework, validation, the thread
   hand-offs and serialisation cost a request; `outside the encoder` = 2 - 1's encode (issue 42's measure).

With --py-spy (the `py-spy` of the dev extra; needs ptrace), the server is sampled during (2) and each
sample is put in the first stage whose pattern its stack matches, innermost frame first; the shares times
the CPU per request give ms per stage. Samples of a thread parked in a wait (the event loop's select, an
idle pool thread) are counted apart, as `idle`: py-spy's own idle detection misses some of them here.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.harness.paths import REPO
from bench.harness.ports import free_port
from bench.harness.profiling import live_timing_queries, py_spy, stat_cpu_s
from bench.harness.servers import APP, service_env, start_server, stop_server, uvicorn_cmd

# innermost frame first: the first (stage, substrings) a frame of the stack matches names the sample
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("encode", ("onnxruntime", "torch/", "query_encoders.py", "onnx_encoder.py", "static_embedding")),
    ("tokenise", ("tokenizers", "tokenization_", "query_tokens.py", "token_slicing.py")),
    ("vector search", ("faiss", "vector_index.py")),
    ("lexical search", ("bm25s", "lexical_index.py", "delta_lexical.py")),
    ("fusion", ("fusion.py",)),
    ("docstore", ("docstore.py", "sqlite3")),
    ("engine (rest)", ("live_bundle.py", "retrieval_modes.py", "query_routing.py", "overlay.py")),
    ("validate", ("pydantic", "schemas/", "request_limits.py")),
    ("serialise", ("json/", "jsonable_encoder", "responses.py", "orjson")),
    ("routes", ("app/api/",)),
    ("middleware", ("middleware", "starlette/", "prometheus_client", "app/metrics.py")),
    ("http server", ("uvicorn", "h11", "httptools")),
    ("event loop + threads", ("asyncio", "concurrent/futures", "threading.py", "anyio")),
]


# a sample whose innermost frame is one of these is a parked thread, not CPU
IDLE_LEAVES = (
    "run (asyncio/runners.py",
    "_worker (concurrent/futures/thread.py",
    "wait (threading.py",
    "get (queue.py",
    "select (selectors.py",
    "_worker (app/engine/batching.py",
)


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid` (the process's /proc stat sums its threads)."""
    return stat_cpu_s(f"/proc/{pid}/stat")


def per_query_cpu_ms(fn: Any, queries: list[str]) -> float:
    """This process's CPU ms per query (all its threads), best of 3 passes after a warm-up."""
    for q in queries[:5]:
        fn(q)
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for q in queries:
            fn(q)
        best = min(best, (time.process_time() - started) / len(queries))
    return best * 1000


def in_process(bundles: Path, encoder: str, mode: str, queries: list[str]) -> dict[str, float]:
    from app.engine.live_bundle import open_live_bundle
    from app.engine.search_spec import SearchSpec
    from contract.bundles.bundle import load_bundle
    from training.bundle.store import BundleStore

    store = BundleStore(bundles)
    live = open_live_bundle(load_bundle(store.version_path(str(store.current_version())), mmap=True), encoder)
    resolved = live.bundle.manifest.extras.get("retrieval", {}).get("default_mode", "dense")
    spec_mode = resolved if mode == "default" else mode
    out = {
        "encode": per_query_cpu_ms(lambda q: live.encode([q]), queries),
        "answer": per_query_cpu_ms(
            lambda q: live.answer(SearchSpec(texts=[q], vectors=None, top_k=10, mode=spec_mode)), queries
        ),
    }
    live.bundle.docstore.close()
    return out


def served(
    bundles: Path, encoder: str, body_mode: str | None, queries: list[str], spy: bool
) -> dict[str, Any]:
    port = free_port()
    env = service_env(bundles, encoder, True, SEARCH_QUERY_CACHE_SIZE="0")
    log = Path(tempfile.mkdtemp()) / "server.log"
    proc = start_server(uvicorn_cmd(APP, port), env, port, log=log)
    url = f"http://127.0.0.1:{port}/search"
    extra = {"mode": body_mode} if body_mode else {}
    try:
        with httpx.Client(timeout=30) as client:
            for q in queries[:10]:  # warm-up
                client.post(url, json={"query": q, "top_k": 10} | extra).raise_for_status()
            sampler = _start_spy(proc.pid) if spy else None
            before, lat = cpu_seconds(proc.pid), []
            for q in queries:
                t0 = time.perf_counter()
                client.post(url, json={"query": q, "top_k": 10} | extra).raise_for_status()
                lat.append(time.perf_counter() - t0)
            used = cpu_seconds(proc.pid) - before
            stacks = _stop_spy(sampler) if sampler else None
    finally:
        stop_server(proc)
    return {
        "cpu_ms": used * 1000 / len(queries),
        "p50_ms": float(np.percentile(lat, 50)) * 1000,
        "stages": _stages(stacks) if stacks else None,
    }


def _start_spy(pid: int) -> tuple[subprocess.Popen[bytes], Path] | None:
    exe = py_spy()
    if exe is None:
        print("py-spy not installed (pip install py-spy): no stage breakdown", flush=True)
        return None
    out = Path(tempfile.mkdtemp()) / "stacks.txt"
    cmd = [str(exe), "record", "--pid", str(pid), "--rate", "1000", "--format", "raw", "--output", str(out)]
    proc = subprocess.Popen(cmd + ["--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the timed requests start
    return proc, out


def _stop_spy(sampler: tuple[subprocess.Popen[bytes], Path] | None) -> Counter[str] | None:
    if sampler is None:
        return None
    proc, out = sampler
    proc.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
    proc.wait(timeout=60)
    counts: Counter[str] = Counter()
    for line in out.read_text(errors="replace").splitlines() if out.exists() else []:
        stack, _, n = line.rpartition(" ")
        counts[stack] += int(n)
    return counts


def _stages(stacks: Counter[str]) -> dict[str, float]:
    """{stage: share of the samples}; a sample is its innermost frame's first matching stage."""
    shares: Counter[str] = Counter()
    idle = 0
    for stack, n in stacks.items():
        frames = stack.split(";")[::-1]  # innermost first
        if frames and frames[0].startswith(IDLE_LEAVES):
            idle += n
            continue
        stage = next(
            (name for frame in frames for name, pats in STAGES if any(p in frame for p in pats)), "other"
        )
        shares[stage] += n
    total = sum(shares.values()) or 1
    print(f"  py-spy: {total} busy samples, {idle} idle ones left out", flush=True)
    return {k: v / total for k, v in shares.most_common()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=REPO / "var" / "bundles")
    ap.add_argument("--encoder", default="onnx-int8")
    ap.add_argument("--mode", default="default", help="dense | lexical | hybrid | default (the bundle's)")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--py-spy", action="store_true")
    args = ap.parse_args(argv)
    queries = live_timing_queries(args.bundles)
    queries = (queries or ["a query"]) * (args.n // max(1, len(queries)) + 1)
    queries = queries[: args.n]
    engine = in_process(args.bundles, args.encoder, args.mode, queries)
    server = served(
        args.bundles, args.encoder, None if args.mode == "default" else args.mode, queries, args.py_spy
    )
    _print(args, engine, server)


def _print(args: argparse.Namespace, engine: dict[str, float], server: dict[str, Any]) -> None:
    print(f"{args.bundles}: encoder {args.encoder}, mode {args.mode}, {args.n} requests, 1 client")
    print(f"  in process   encode          {engine['encode']:7.3f} ms CPU / query")
    print(f"  in process   engine answer   {engine['answer']:7.3f} ms CPU / query")
    print(
        f"  server       per request     {server['cpu_ms']:7.3f} ms CPU   (wall p50 {server['p50_ms']:.2f} ms)"
    )
    print(f"  outside the engine           {server['cpu_ms'] - engine['answer']:7.3f} ms CPU / request")
    print(f"  outside the encoder          {server['cpu_ms'] - engine['encode']:7.3f} ms CPU / request")
    for stage, share in (server["stages"] or {}).items():
        print(f"    {stage:22s} {share * server['cpu_ms']:7.3f} ms  ({share:5.1%})")
