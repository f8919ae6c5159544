"""Load benchmark of POST /search against a real uvicorn server on 127.0.0.1, with its peers in the same run.

    flock "$HEAVY_LOCK" .venv/bin/python bench/load_bench.py [--corpora scifact,pydocs,manpages] [--seconds 4]
    flock "$HEAVY_LOCK" .venv/bin/python bench/load_bench.py --bundles DIR [...]   # one bundle, every encoder

Default: the table for each of three corpora in one run (bench/corpora_load.py: the naive app vs this
service as `python -m app.serve` starts it, default mode and dense, 1/8/32 clients). With --bundles (or
--distractors) the single-bundle run below.

Without --bundles it builds (once, cached under var/bench/, git-ignored) a bundle of the whole scifact
corpus (../shared/data/scifact) with the base all-MiniLM-L6-v2 and an exact (flat) index, plus its ONNX
query encoders with their measured nDCG@10 vs torch. Document vectors are computed with the ONNX fp32
export (cosine 1.0000 to torch, about 2x faster on this CPU), then written as the torch encoder's bundle.
`bench/distill_scifact.py --publish` adds the distilled query encoders (a new version of that folder).

First, in this process and without HTTP, it times each query encoder alone (ms per query, one query per
call) and reads its nDCG@10 on scifact's test queries from the bundle manifest.

Then every system serves in turn and gets closed-loop load at concurrency 1, 8 and 32: each client sends
queries back to back, bounded by --seconds and --max-requests per cell, --repeat times per cell (the
median-throughput run is reported). Systems:
- this service with each `--backends` query encoder (`auto` = the choice at --max-ndcg-loss, timed at
  load), query cache off, so every request is encoded (scifact's queries, round robin);
- the same `auto` server with the query cache on, replaying a Zipf(1) sample of the 300 test queries;
- with `--workers-compare`, `auto` as 2 uvicorn workers with 1 intra-op thread each (the default is
  1 process with the library's thread count);
- peers (`--peers`): the naive FastAPI + torch + FAISS flat app (bench/naive_app.py), and txtai's API
  (bench/txtai_peer.py, in a venv of its own) when it installs.
The load generator is wrk (`apt-get install wrk`; C, one thread, a few percent of a core) when installed,
else an httpx client, which costs the server about a core at high rates. Client and server share the
machine's cores, so absolute numbers are pessimistic; ratios against the naive app in the same run are the
result.
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

from contract.jobs.plan import IndexPlan
from training.bundle.build import BuildOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ siblings (corpora, corpora_load)
REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
CACHE = REPO / "var" / "bench"


def build_bundle_if_needed(bundles: Path, distractors: int = 0, doc_embeddings: Path | None = None) -> str:
    from training.bundle.store import BundleStore

    store = BundleStore(bundles)
    if store.current_version():
        return store.current_version()  # type: ignore[return-value]
    from contract.encoding.encoder import Encoder, default_model_path, document_text
    from contract.encoding.onnx_encoder import OnnxQueryEncoder
    from training.bundle.build import build_bundle
    from training.data.beir import load_beir
    from training.data.retrieval_data import Document
    from training.export.onnx_export import attach_onnx, export_onnx

    print(f"building the scifact bench bundle in {bundles} (once)", flush=True)
    test = load_beir(SCIFACT, "test")
    base_onnx = CACHE / "base-onnx"
    if not (base_onnx / "onnx" / "model.onnx").exists():
        base_onnx.mkdir(parents=True, exist_ok=True)
        export_onnx(default_model_path(), base_onnx / "onnx", quantize=False)
        shutil.copy(default_model_path() / "tokenizer.json", base_onnx / "tokenizer.json")
    fast = OnnxQueryEncoder.load(base_onnx, variant="fp32")
    texts = [document_text(d.title, d.text) for d in test.corpus.values()]
    if doc_embeddings is not None:  # e.g. an entry of training.eval.embedding_cache for the same model
        emb = np.load(doc_embeddings).astype(np.float32)  # (n_docs, dim), corpus order
        if emb.shape[0] != len(texts):
            raise SystemExit(f"{doc_embeddings}: {emb.shape[0]} rows for {len(texts)} documents")
    else:
        t0 = time.perf_counter()
        emb = np.concatenate(
            [fast.encode(texts[i : i + 256], batch_size=32) for i in range(0, len(texts), 256)]
        )
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
    build_bundle(
        Encoder.load(),
        corpus,
        staging_dir=staging,
        doc_embeddings=emb,
        build=BuildOptions(index=IndexPlan(kind="flat")),
    )
    record = attach_onnx(staging, test.queries, test.qrels, quantize=True)
    print(f"ONNX quality (nDCG@10 on {record['n_queries']} test queries): {record['ndcg@10']}", flush=True)
    return store.publish(staging, force=True).version


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(bundles: Path, backend: str, microbatch: bool, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_ENCODER_BACKEND": backend,
        "SEARCH_MICROBATCH_ENABLED": "true" if microbatch else "false",
        "SEARCH_RELOAD_POLL_SECONDS": "0",
        "SEARCH_QUEUE_MAX": "4096",
        "SEARCH_LOG_LEVEL": "WARNING",
        **extra,
    }


def uvicorn_cmd(target: str, port: int, *, factory: bool = True, workers: int = 1) -> list[str]:
    cmd = [sys.executable, "-m", "uvicorn", *(["--factory"] if factory else []), target]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    return cmd + (["--workers", str(workers)] if workers > 1 else [])


def start_server(
    cmd: list[str], env: dict[str, str], port: int, ready_path: str = "/readyz", timeout: float = 600
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{cmd[2:5]} exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}{ready_path}", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"server not ready after {timeout} s")


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


def write_wrk_bodies(queries: list[str], name: str = "wrk_bodies.jsonl", get: bool = False) -> Path:
    """One /search body per line (or, `get`, one txtai GET path), for bench/search_load.lua."""
    bodies = CACHE / name
    bodies.parent.mkdir(parents=True, exist_ok=True)
    if get:
        from urllib.parse import quote

        lines = [f"/search?query={quote(q)}&limit=10" for q in queries]
    else:
        lines = [json.dumps({"query": q, "top_k": 10}) for q in queries]
    bodies.write_text("".join(line + "\n" for line in lines))
    return bodies


def zipf_replay(queries: list[str], n: int, seed: int = 0) -> list[str]:
    """n queries drawn with P(rank r) ∝ 1/r over a seeded shuffle of `queries`: a repetitive workload."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(queries))
    p = 1.0 / np.arange(1, len(queries) + 1)
    return [queries[order[i]] for i in rng.choice(len(queries), size=n, p=p / p.sum())]


def drive_wrk(url: str, bodies: Path, concurrency: int, seconds: float, max_requests: int) -> dict:
    """The same closed-loop load from wrk (C, one thread): far less client CPU taken from the server."""
    cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "30s"]
    cmd += ["-s", str(REPO / "bench" / "search_load.lua"), url]
    env = {**os.environ, "BODIES": str(bodies), "MAX_REQUESTS": str(max_requests)}
    if "txtai" in bodies.name:
        env["METHOD"] = "GET"
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
    from app.engine.live_bundle import SearchSpec, open_live_bundle
    from contract.bundles.bundle import load_bundle

    live = open_live_bundle(load_bundle(bundles / version), backend)

    def spec(q: str) -> SearchSpec:
        return SearchSpec(texts=[q], vectors=None, top_k=10)

    for q in queries[:5]:
        live.answer(spec(q))
    single = []
    for q in queries[:200]:
        t0 = time.perf_counter()
        live.answer(spec(q))
        single.append(time.perf_counter() - t0)
    per_chunk = {}
    for chunk in (8, 32):
        live.encode_batch_size = chunk
        batched = []
        for start in range(0, 320, 32):
            t0 = time.perf_counter()
            live.answer_batch([spec(q) for q in queries[start : start + 32]])
            batched.append((time.perf_counter() - t0) / 32)
        per_chunk[chunk] = float(np.median(batched)) * 1000
    one, many = float(np.median(single)) * 1000, min(per_chunk.values())
    return {"backend": backend, "single_ms": one, "batched_ms_per_query": many, "ceiling": one / many}


def encode_costs(bundles: Path, version: str, backends: list[str], max_loss: float) -> dict[str, dict]:
    """Per query encoder: ms per query (one per call, in process) and its recorded nDCG@10 on scifact test."""
    from app.engine.encoder_choice import load_encoder_backend, recorded_ndcg_losses, time_encoder
    from contract.bundles.bundle import load_bundle
    from training.data.beir import load_beir

    bundle = load_bundle(bundles / version)
    extras = bundle.manifest.extras
    full = (extras.get("onnx") or {}).get("ndcg@10", {}).get("torch")
    ndcg = {"torch": full}
    ndcg |= {"onnx": extras.get("onnx", {}).get("ndcg@10", {}).get("fp32")}
    ndcg |= {"onnx-int8": extras.get("onnx", {}).get("ndcg@10", {}).get("int8")}
    ndcg |= {k: v["ndcg@10"] for k, v in (extras.get("query_encoders") or {}).get("variants", {}).items()}
    test = list(load_beir(SCIFACT, "test").queries.values())[:100]
    out = {}
    for backend in sorted(recorded_ndcg_losses(bundle)):
        ms = time_encoder(load_encoder_backend(bundle, backend), test)
        out[backend] = {"ms_per_query": ms, "ndcg@10": ndcg.get(backend)}
        print(f"{backend:10s} encode {ms:8.3f} ms/query  nDCG@10 {ndcg.get(backend)}", flush=True)
    from app.engine.encoder_choice import choose_encoder_backend

    chosen, _, record = choose_encoder_backend(bundle, max_ndcg_loss=max_loss)
    out["auto"] = {**out[chosen], "chosen": chosen, "choice": record}
    print(f"auto at nDCG budget {max_loss}: {chosen}", flush=True)
    return out


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
    parser.add_argument(
        "--doc-embeddings",
        type=Path,
        default=None,
        help="a .npy of the base model's scifact corpus vectors (corpus order) to build the bundle from, "
        "instead of encoding the corpus",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each cell")
    parser.add_argument("--max-requests", type=int, default=5000, help="request cap of each cell")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per cell; the table shows the median-throughput run"
    )
    parser.add_argument("--backends", default="auto,torch,onnx-int8,distilled,static")
    parser.add_argument("--max-ndcg-loss", default="0.01", help="SEARCH_MAX_NDCG_LOSS of the auto server")
    parser.add_argument("--peers", default="naive,txtai", help="comma-separated; empty for none")
    parser.add_argument("--no-cache-run", action="store_true", help="skip the cache-on Zipf replay")
    parser.add_argument("--workers-compare", action="store_true", help="also auto as 2 workers x 1 thread")
    parser.add_argument("--microbatch", default="on", help="on, off or on,off")
    parser.add_argument("--ceilings", action="store_true", help="print each encoder's micro-batching ceiling")
    parser.add_argument(
        "--client",
        choices=["auto", "wrk", "httpx"],
        default="auto",
        help="load generator: wrk when installed (apt-get install wrk), else httpx (costs the server CPU)",
    )
    parser.add_argument("--out", type=Path, default=CACHE / "load_bench.json")
    parser.add_argument(
        "--corpora",
        default="scifact,pydocs,manpages",
        help="the corpora of the default run (bench/corpora.py); ignored with --bundles or --distractors",
    )
    parser.add_argument(
        "--variants", default="static", help="distilled query encoders the default run's bundles carry"
    )
    args = parser.parse_args()
    if args.bundles is None and not args.distractors:
        import corpora_load

        if args.max_ndcg_loss == "0.01":  # the single-bundle run's default; the corpora use the service's
            args.max_ndcg_loss = None
        corpora_load.main(args, sys.modules[__name__])
        return

    from training.data.beir import load_beir, load_queries

    bundles = args.bundles or CACHE / ("bundles" if not args.distractors else f"bundles-{args.distractors}")
    version = build_bundle_if_needed(bundles, args.distractors, args.doc_embeddings)
    queries = list(load_queries(SCIFACT / "queries.jsonl").values())
    levels = [int(c) for c in args.concurrency.split(",")]
    client = args.client if args.client != "auto" else ("wrk" if shutil.which("wrk") else "httpx")
    if client == "wrk" and not shutil.which("wrk"):
        raise SystemExit("--client wrk: wrk is not installed (apt-get install wrk)")
    print(f"load generator: {client}; bundle {version}", flush=True)
    backends = [b for b in args.backends.split(",") if b]
    costs = encode_costs(bundles, version, [b for b in backends if b != "auto"], float(args.max_ndcg_loss))
    test_queries = list(load_beir(SCIFACT, "test").queries.values())
    for backend in [b for b in backends if b != "auto"] if args.ceilings else []:
        c = encoder_ceiling(bundles, version, backend, queries)
        print(
            f"{backend:10s} in-process: one query {c['single_ms']:.2f} ms, in batches of 32 "
            f"{c['batched_ms_per_query']:.2f} ms/query -> micro-batching can gain at most {c['ceiling']:.2f}x",
            flush=True,
        )
    bodies = {
        "unique": write_wrk_bodies(queries),
        "zipf": write_wrk_bodies(zipf_replay(test_queries, 20000), "wrk_zipf.jsonl"),
        "txtai": write_wrk_bodies(queries, "wrk_txtai.jsonl", get=True),
    }

    # (label, encoder, command, env, ready path, workload)
    systems: list[tuple[str, str, list[str], dict[str, str], str, str]] = []
    no_cache, loss = {"SEARCH_QUERY_CACHE_SIZE": "0"}, {"SEARCH_MAX_NDCG_LOSS": args.max_ndcg_loss}
    for peer in [p for p in args.peers.split(",") if p]:
        if peer == "naive":
            env = {**os.environ, "NAIVE_BUNDLE": str(bundles / version)}
            systems.append(
                (
                    "naive FastAPI + torch + FAISS flat",
                    "torch",
                    uvicorn_cmd("bench.naive_app:create_app", 0),
                    env,
                    "/readyz",
                    "unique",
                )
            )
        elif peer == "txtai":
            import txtai_peer

            problem = txtai_peer.ensure_venv()
            if problem is None:
                try:
                    txtai_peer.build_index((bundles / version).resolve())
                except subprocess.CalledProcessError as exc:
                    problem = f"txtai index build failed ({exc.returncode})"
            if problem:
                print(f"txtai: skipped: {problem}", flush=True)
                continue
            cmd, env = txtai_peer.server_command(0)
            systems.append(
                (
                    "txtai API (same model, FAISS flat)",
                    "torch",
                    cmd,
                    env,
                    "/search?query=warm&limit=1",
                    "txtai",
                )
            )
    for backend in backends:
        for mb in args.microbatch.split(","):
            env = service_env(bundles, backend, mb == "on", **no_cache, **loss)
            label = f"this service, micro-batching {mb}"
            systems.append((label, backend, uvicorn_cmd("app.main:create_app", 0), env, "/readyz", "unique"))
    if "auto" in backends and not args.no_cache_run:
        env = service_env(bundles, "auto", True, **loss)
        systems.append(
            (
                "this service, cache on (Zipf replay)",
                "auto",
                uvicorn_cmd("app.main:create_app", 0),
                env,
                "/readyz",
                "zipf",
            )
        )
    if args.workers_compare:
        env = service_env(bundles, "auto", True, **no_cache, **loss, SEARCH_ENCODER_THREADS="1")
        cmd = uvicorn_cmd("app.main:create_app", 0, workers=2)
        systems.append(("this service, 2 workers x 1 thread", "auto", cmd, env, "/readyz", "unique"))

    rows = []
    for label, encoder, cmd, env, ready, workload in systems:
        port = free_port()
        cmd = [str(port) if c == "0" and cmd[i - 1] == "--port" else c for i, c in enumerate(cmd)]
        proc = start_server(cmd, env, port, ready)
        try:
            url = f"http://127.0.0.1:{port}"
            served = encoder
            if "SEARCH_ENCODER_BACKEND" in env:
                served = httpx.get(f"{url}/bundles", timeout=30).json()["encoder_backend"]
            for c in levels:
                runs = []
                for _ in range(args.repeat):
                    if client == "wrk":
                        runs.append(drive_wrk(url, bodies[workload], c, args.seconds, args.max_requests))
                    else:
                        runs.append(asyncio.run(drive(url, queries, c, args.seconds, args.max_requests)))
                r = {
                    "system": label,
                    "encoder": encoder,
                    "served": served,
                    "concurrency": c,
                    **median_run(runs),
                }
                rows.append(r)
                print(
                    f"{label:40s} {served:10s} c={c:<3d} {r['qps']:8.1f} req/s  p50 {r['p50_ms']:8.2f} ms  "
                    f"p99 {r['p99_ms']:8.2f} ms  n={r['n']} errors={r['errors']}",
                    flush=True,
                )
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    def cell(label: str, encoder: str, c: int) -> dict | None:
        return next(
            (r for r in rows if r["system"] == label and r["encoder"] == encoder and r["concurrency"] == c),
            None,
        )

    naive = "naive FastAPI + torch + FAISS flat"
    print(
        f"\nbundle {version}; load generator {client}; cells of {args.seconds:g} s, median of {args.repeat}\n"
    )
    head = " | ".join(f"c={c} req/s (p50 / p99 ms)" for c in levels)
    print(f"| system | query encoder | nDCG@10 | encode ms/query | {head} | c={levels[-1]} vs naive |")
    print("|---|---|---:|---:|" + "---:|" * len(levels) + "---:|")
    seen = []
    for r in rows:
        key = (r["system"], r["encoder"])
        if key in seen:
            continue
        seen.append(key)
        cost = (
            costs.get(r["served"], {})
            if r["system"] != naive and "txtai" not in r["system"]
            else costs.get("torch", {})
        )
        cells = []
        for c in levels:
            x = cell(*key, c)
            cells.append(f"{x['qps']:.1f} ({x['p50_ms']:.1f} / {x['p99_ms']:.0f})" if x else "")
        top, base = cell(*key, levels[-1]), cell(naive, "torch", levels[-1])
        ratio = f"{top['qps'] / base['qps']:.2f}x" if top and base else ""
        enc = r["encoder"] if r["encoder"] == r["served"] else f"{r['encoder']} → {r['served']}"
        nd = cost.get("ndcg@10")
        ms = cost.get("ms_per_query")
        print(
            f"| {r['system']} | {enc} | {nd if nd is not None else ''} | {f'{ms:.3f}' if ms else ''} | "
            + " | ".join(cells)
            + f" | {ratio} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"version": version, "encoders": costs, "rows": rows}, indent=2, default=str)
    )
    print(f"\nraw results: {args.out}")


if __name__ == "__main__":
    main()
