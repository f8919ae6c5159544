"""Where one /search request's CPU goes: the encoder, the rest of the engine, and everything around them.

    .venv/bin/python -m bench request_profile [--bundles var/bundles] [--encoder onnx-int8]
        [--mode default] [--seconds 10] [--clients 1,32] [--threads 1] [--py-spy] [--bodies FILE.jsonl]

Measurements of the same queries (the bundle's recorded evaluation queries, or those of --bodies: load_bench's
own, the corpus's test queries), all in CPU time, so a shared, loaded machine moves them far less than wall
time:

1. in process, with the server's --threads, this process's CPU per query (every thread): the query encoder alone
   (`LiveBundle.encode`), and the whole engine answer (`LiveBundle.answer`: encode, vector and lexical
   search, fusion, hits, docstore); their difference is the engine's own work besides the encoder;
2. a real server (uvicorn, one process, query cache off, micro-batching on, --threads intra-op threads)
   with a meter on its query encoder (bench/harness/encode_meter.py), driven by wrk (or, without wrk,
   httpx clients, which cost the server CPU) at each --clients level: the server process's CPU per request (utime + stime of
   every thread, from /proc), of which the event loop thread's, and the encoder's own CPU per request
   read from the meter over the same requests, in its two parts: the model and the query tokenizer.
   `outside the encoder` = the server's CPU less both, measured in one window of one process (issue 42's
   measure: the encoder it is set against, "in process encode" in 1., tokenises too); `outside the
   model` less the model alone. With one intra-op thread (the default) the encoder
   runs wholly on the calling thread, so the meter holds all of its CPU; with more, onnxruntime's pool
   threads are billed to `outside` and the line says so. So the server runs without the encoder's
   spare-core session (SEARCH_ENCODER_SPARE_CORES=false): its second thread's CPU is the encoder's, which
   the meter cannot see (python -m bench spare_cores measures what that session changes).

With --py-spy (the `py-spy` of the dev extra; needs ptrace), the server is sampled during the first level
and each sample is put in the first stage whose pattern its stack matches, innermost frame first; the
shares times the CPU per request give ms per stage. Samples of a thread parked in a wait (the event
loop's select, an idle pool thread) are counted apart, as `idle`: py-spy's own idle detection misses
some of them here, and a thread waiting for the GIL is sampled where it waits, so stage shares are
rougher than the metered split.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.harness.paths import REPO
from bench.harness.ports import free_port
from bench.harness.profiling import live_timing_queries, py_spy, stat_cpu_s
from bench.harness.servers import service_env, start_server, stop_server, uvicorn_cmd
from bench.harness.wrk import drive, drive_wrk, write_wrk_bodies

METERED_APP = "bench.harness.encode_meter:create_app"

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


def in_process(bundles: Path, encoder: str, mode: str, queries: list[str], threads: int) -> dict[str, float]:
    from app.engine.live_bundle import EncoderOptions, open_live_bundle
    from app.engine.search_spec import SearchSpec
    from contract.bundles.bundle import load_bundle
    from contract.index.vector_index import VectorIndex
    from training.bundle.store import BundleStore

    store = BundleStore(bundles)
    bundle = load_bundle(store.version_path(str(store.current_version())), mmap=True)
    if isinstance(bundle.index, VectorIndex):
        bundle.index.keep_half_copy()  # as the server keeps it (SEARCH_INDEX_HALF_SCAN's default)
    options = EncoderOptions(threads=threads, spare_cores=False)  # as the metered server runs it
    live = open_live_bundle(bundle, encoder, options)
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
    bundles: Path, args: argparse.Namespace, body_mode: str | None, queries: list[str]
) -> list[dict[str, Any]]:
    """One metered server, each --clients level in turn: its CPU per request, split."""
    port = free_port()
    env = service_env(
        bundles,
        args.encoder,
        True,
        SEARCH_QUERY_CACHE_SIZE="0",
        SEARCH_ENCODER_THREADS=str(args.threads),
        SEARCH_ENCODER_SPARE_CORES="false",  # its second thread would be billed to `outside`
    )
    log = Path(tempfile.mkdtemp()) / "server.log"
    proc = start_server(uvicorn_cmd(METERED_APP, port), env, port, log=log)
    base = f"http://127.0.0.1:{port}"
    extra = {"mode": body_mode} if body_mode else {}
    body_file = (
        write_wrk_bodies(queries, "request_profile_bodies.jsonl", extra=extra)
        if shutil.which("wrk")
        else None
    )
    levels = [int(c) for c in args.clients.split(",")]
    rows: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            for q in queries[:10]:  # warm-up
                client.post("/search", json={"query": q, "top_k": 10} | extra).raise_for_status()
            for i, clients in enumerate(levels):
                sampler = _start_spy(proc.pid) if args.py_spy and i == 0 else None
                meter0, main0, all0 = _snapshot(client, proc.pid)
                load = _drive(base, body_file, queries, extra, clients, args.seconds)
                meter1, main1, all1 = _snapshot(client, proc.pid)
                stacks = _stop_spy(sampler) if sampler else None
                n = max(1, load["n"])
                cpu_ms = (all1 - all0) * 1000 / n
                rows.append(
                    {
                        "clients": clients,
                        "n": load["n"],
                        "qps": load["qps"],
                        "p50_ms": load["p50_ms"],
                        "cpu_ms": cpu_ms,
                        "loop_ms": (main1 - main0) * 1000 / n,
                        "encoder_ms": (meter1["cpu_ns"] - meter0["cpu_ns"]) / 1e6 / n,
                        "tokenizer_ms": (meter1["tokenizer_cpu_ns"] - meter0["tokenizer_cpu_ns"]) / 1e6 / n,
                        "batch": (meter1["texts"] - meter0["texts"])
                        / max(1, meter1["calls"] - meter0["calls"]),
                        "stages": _stages(stacks) if stacks else None,
                    }
                )
    finally:
        stop_server(proc)
    return rows


def _snapshot(client: httpx.Client, pid: int) -> tuple[dict[str, int], float, float]:
    """The encoder meter's totals, the event loop thread's CPU seconds and the whole process's."""
    meter = client.get("/bench/encoder-cpu").raise_for_status().json()
    return meter, stat_cpu_s(f"/proc/{pid}/task/{pid}/stat"), cpu_seconds(pid)


def _drive(
    base: str, body_file: Path | None, queries: list[str], extra: dict[str, str], clients: int, seconds: float
) -> dict[str, Any]:
    """wrk at `clients` for `seconds`; without wrk, the httpx closed loop (it costs the server CPU)."""
    if body_file is not None:
        return drive_wrk(f"{base}/search", body_file, clients, seconds, 0)
    return asyncio.run(drive(base, queries, clients, seconds, 10**9, extra))


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
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each level")
    ap.add_argument("--clients", default="1,32", help="comma-separated client counts (wrk)")
    ap.add_argument("--threads", type=int, default=1, help="the server's SEARCH_ENCODER_THREADS")
    ap.add_argument("--py-spy", action="store_true")
    ap.add_argument(
        "--bodies",
        type=Path,
        help="a JSONL of /search bodies whose `query` fields are the queries (load_bench writes the corpus's test "
        "queries to var/bench/corpora/wrk/NAME-default.jsonl); default: the bundle's recorded timing queries",
    )
    args = ap.parse_args(argv)
    queries = _queries(args.bodies) if args.bodies else live_timing_queries(args.bundles) or ["a query"]
    engine = in_process(
        args.bundles, args.encoder, args.mode, (queries * (300 // len(queries) + 1))[:300], args.threads
    )
    rows = served(args.bundles, args, None if args.mode == "default" else args.mode, queries)
    _print(args, engine, rows)


def _queries(bodies: Path) -> list[str]:
    queries = [json.loads(line)["query"] for line in bodies.read_text().splitlines() if line.strip()]
    if not queries:
        raise SystemExit(f"{bodies}: no bodies")
    return queries


def _print(args: argparse.Namespace, engine: dict[str, float], rows: list[dict[str, Any]]) -> None:
    print(f"{args.bundles}: encoder {args.encoder}, mode {args.mode}, {args.threads} intra-op thread(s)")
    print(f"  in process   encode                {engine['encode']:7.3f} ms CPU / query")
    print(f"  in process   engine answer         {engine['answer']:7.3f} ms CPU / query")
    print(f"  in process   engine besides encode {engine['answer'] - engine['encode']:7.3f} ms CPU / query")
    pool = " (onnxruntime's pool threads included)" if args.threads > 1 else ""
    for r in rows:
        print(
            f"  server, {r['clients']} client(s): {r['n']} requests, {r['qps']:.0f} req/s, p50 {r['p50_ms']:.2f} ms, "
            f"{r['batch']:.1f} queries an encoder call"
        )
        print(f"    per request                      {r['cpu_ms']:7.3f} ms CPU")
        encoder = r["encoder_ms"] + r["tokenizer_ms"]
        print(f"    the encoder's model (metered)    {r['encoder_ms']:7.3f} ms CPU")
        print(f"    the query tokenizer (metered)    {r['tokenizer_ms']:7.3f} ms CPU")
        print(f"    outside the encoder              {r['cpu_ms'] - encoder:7.3f} ms CPU{pool}")
        print(f"    outside the model                {r['cpu_ms'] - r['encoder_ms']:7.3f} ms CPU{pool}")
        print(f"      of which the event loop thread {r['loop_ms']:7.3f} ms CPU")
        for stage, share in (r["stages"] or {}).items():
            print(f"      {stage:22s} {share * r['cpu_ms']:7.3f} ms  ({share:5.1%})")


if __name__ == "__main__":
    main()
