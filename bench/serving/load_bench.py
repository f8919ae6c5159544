"""Load benchmark of POST /search against a real uvicorn server on 127.0.0.1, with its peers in the same run.

    flock "$HEAVY_LOCK" .venv/bin/python -m bench load_bench [--corpora scifact,pydocs,manpages] [--seconds 4]
    flock "$HEAVY_LOCK" .venv/bin/python -m bench load_bench --bundles DIR [...]   # one bundle, every encoder

Default: the table for each of three corpora in one run (bench/serving/corpora_load.py: the naive app vs this
service as `python -m app.serve` starts it, default mode and dense, 1/8/32 clients). With --bundles (or
--distractors) the single-bundle run below.

Without --bundles it builds (once, cached under var/bench/, git-ignored) a bundle of the whole scifact
corpus (../shared/data/scifact) with the base all-MiniLM-L6-v2 and an exact (flat) index, plus its ONNX
query encoders with their measured nDCG@10 vs torch. Document vectors are computed with the ONNX fp32
export (cosine 1.0000 to torch, about 2x faster on this CPU), then written as the torch encoder's bundle.
`python -m bench distill_scifact --publish` adds the distilled query encoders (a new version of that folder).

First, in this process and without HTTP, it times each query encoder alone (ms per query, one query per
call) and reads its nDCG@10 on scifact's test queries from the bundle manifest.

Then every system serves in turn and gets closed-loop load at concurrency 1, 8 and 32: each client sends
queries back to back, bounded by --seconds and --max-requests per cell, --repeat times per cell (the
median-throughput run is reported). Systems:
- this service with each `--backends` query encoder (`auto` = the choice at --max-ndcg-loss, timed at
  load), query cache off, so every request is encoded (round robin: with --bundles the queries the live bundle recorded for timing its encoders, else scifact's);
- the same `auto` server with the query cache on, replaying a Zipf(1) sample of the 300 test queries;
- with `--workers-compare`, each `--backends` encoder again as 2 worker processes with 1 intra-op thread
  each, started as `python -m app.serve` starts them (a listening socket per worker); the rows above are
  1 process with the library's thread count;
- peers (`--peers`): the naive FastAPI + torch + FAISS flat app (bench/serving/naive_app.py), and txtai's API
  (bench/serving/txtai_peer.py, in a venv of its own) when it installs.
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
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np

from bench.harness.paths import CACHE, require_scifact
from bench.harness.ports import free_port
from bench.harness.profiling import live_timing_queries
from bench.harness.servers import (
    APP,
    NAIVE_APP,
    on_port,
    serve_cmd,
    service_env,
    start_server,
    stop_server,
    uvicorn_cmd,
)
from bench.harness.wrk import drive, drive_wrk, median_run, qps_shown, write_wrk_bodies
from contract.jobs.plan import IndexPlan
from training.bundle.build import BuildOptions

NAIVE = "naive FastAPI + torch + FAISS flat"
# (label, encoder, command, env, ready path, workload)
System = tuple[str, str, list[str], dict[str, str], str, str]


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
    test = load_beir(require_scifact(), "test")
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


def zipf_replay(queries: list[str], n: int, seed: int = 0) -> list[str]:
    """n queries drawn with P(rank r) ∝ 1/r over a seeded shuffle of `queries`: a repetitive workload."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(queries))
    p = 1.0 / np.arange(1, len(queries) + 1)
    return [queries[order[i]] for i in rng.choice(len(queries), size=n, p=p / p.sum())]


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
    test = list(load_beir(require_scifact(), "test").queries.values())[:100]
    out = {}
    for backend in sorted(recorded_ndcg_losses(bundle)):
        ms = time_encoder(load_encoder_backend(bundle, backend), test)
        out[backend] = {"ms_per_query": ms, "ndcg@10": ndcg.get(backend)}
        print(f"{backend:10s} encode {ms:8.3f} ms/query  nDCG@10 {ndcg.get(backend)}", flush=True)
    from app.engine.encoder_choice import choose_encoder_backend

    chosen, _, record = choose_encoder_backend(bundle, max_ndcg_loss=max_loss)
    # a routed choice (static-routed) is no recorded backend of its own: its cost is in the choice's record
    timed = out.get(chosen, {"ms_per_query": None, "ndcg@10": None})
    out["auto"] = {**timed, "chosen": chosen, "choice": record}
    print(f"auto at nDCG budget {max_loss}: {chosen}", flush=True)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
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
    parser.add_argument(
        "--workers-compare", action="store_true", help="also each --backends encoder as 2 workers x 1 thread"
    )
    parser.add_argument("--microbatch", default="on", help="on, off or on,off")
    parser.add_argument("--ceilings", action="store_true", help="print each encoder's micro-batching ceiling")
    parser.add_argument(
        "--client",
        choices=["auto", "wrk", "httpx"],
        default="auto",
        help="load generator: wrk when installed (apt-get install wrk), else httpx (costs the server CPU)",
    )
    parser.add_argument("--out", type=Path, default=CACHE / "load_bench.json")
    corpus_run_options(parser)
    return parser.parse_args(argv)


def corpus_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of the default run, over bench/harness/corpora.py's corpora (bench/serving/corpora_load.py)."""
    parser.add_argument(
        "--corpora",
        default="scifact,pydocs,manpages",
        help="the corpora of the default run (bench/harness/corpora.py); ignored with --bundles or --distractors",
    )
    parser.add_argument(
        "--corpora-encoder",
        default="auto",
        help="SEARCH_ENCODER_BACKEND of the service in the default run (e.g. onnx-int8: the static tower off)",
    )
    parser.add_argument(
        "--variants", default="static", help="distilled query encoders the default run's bundles carry"
    )
    parser.add_argument(
        "--mode-pairs",
        type=int,
        default=6,
        help="the corpus run: alternated default-mode/dense pairs at 32 clients on the default server (0: none)",
    )
    parser.add_argument(
        "--naive-pairs",
        type=int,
        default=4,
        help="the corpus run: alternated naive/default-mode pairs at 32 clients, both servers up (0: none)",
    )


def load_client(choice: str) -> str:
    client = choice if choice != "auto" else ("wrk" if shutil.which("wrk") else "httpx")
    if client == "wrk" and not shutil.which("wrk"):
        raise SystemExit("--client wrk: wrk is not installed (apt-get install wrk)")
    return client


def print_ceilings(bundles: Path, version: str, backends: list[str], queries: list[str]) -> None:
    for backend in backends:
        c = encoder_ceiling(bundles, version, backend, queries)
        print(
            f"{backend:10s} in-process: one query {c['single_ms']:.2f} ms, in batches of 32 "
            f"{c['batched_ms_per_query']:.2f} ms/query -> micro-batching can gain at most {c['ceiling']:.2f}x",
            flush=True,
        )


def peer_systems(peers: str, bundle: Path) -> list[System]:
    """The naive app and txtai's API on the same bundle (txtai skipped, with the reason, when it fails)."""
    from bench.serving import txtai_peer

    systems: list[System] = []
    for peer in [p for p in peers.split(",") if p]:
        if peer == "naive":
            env = {**os.environ, "NAIVE_BUNDLE": str(bundle)}
            systems.append((NAIVE, "torch", uvicorn_cmd(NAIVE_APP, 0), env, "/readyz", "unique"))
        elif peer == "txtai":
            problem = txtai_peer.ensure_venv()
            if problem is None:
                try:
                    txtai_peer.build_index(bundle.resolve())
                except subprocess.CalledProcessError as exc:
                    problem = f"txtai index build failed ({exc.returncode})"
            if problem:
                print(f"txtai: skipped: {problem}", flush=True)
                continue
            cmd, env = txtai_peer.server_command(0)
            label = "txtai API (same model, FAISS flat)"
            systems.append((label, "torch", cmd, env, "/search?query=warm&limit=1", "txtai"))
    return systems


def service_systems(args: argparse.Namespace, bundles: Path, backends: list[str]) -> list[System]:
    """This service with each query encoder, the cache-on replay and the two-worker layout, as asked."""
    systems: list[System] = []
    no_cache, loss = {"SEARCH_QUERY_CACHE_SIZE": "0"}, {"SEARCH_MAX_NDCG_LOSS": args.max_ndcg_loss}
    for backend in backends:
        for mb in args.microbatch.split(","):
            env = service_env(bundles, backend, mb == "on", **no_cache, **loss)
            label = f"this service, micro-batching {mb}"
            systems.append((label, backend, uvicorn_cmd(APP, 0), env, "/readyz", "unique"))
    if "auto" in backends and not args.no_cache_run:
        env = service_env(bundles, "auto", True, **loss)
        label = "this service, cache on (Zipf replay)"
        systems.append((label, "auto", uvicorn_cmd(APP, 0), env, "/readyz", "zipf"))
    for backend in backends if args.workers_compare else []:  # each encoder as one process and as two
        # as python -m app.serve runs them: a socket per worker (uvicorn's shared one let one worker take
        # nearly every connection: bench/results/worker_balance.txt)
        env = service_env(
            bundles, backend, True, **no_cache, **loss, SEARCH_ENCODER_THREADS="1", SEARCH_WORKERS="2"
        )
        env.pop("OMP_NUM_THREADS", None)
        systems.append(("this service, 2 workers x 1 thread", backend, serve_cmd(), env, "/readyz", "unique"))
    return systems


def measure(
    systems: list[System], args: argparse.Namespace, client: str, bodies: dict[str, Path], queries: list[str]
) -> list[dict]:
    """Every system in turn on its own port, every concurrency level, --repeat runs per cell."""
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    for label, encoder, cmd, env, ready, workload in systems:
        port = free_port()
        proc = start_server(on_port(cmd, port), env, port, ready)
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
                    f"{label:40s} {served:10s} c={c:<3d} {qps_shown(r):>8s} req/s  p50 {r['p50_ms']:8.2f} ms  "
                    f"p99 {r['p99_ms']:8.2f} ms  n={r['n']} errors={r['errors']}",
                    flush=True,
                )
        finally:
            stop_server(proc)
    return rows


def print_table(rows: list[dict], costs: dict[str, dict], levels: list[int]) -> None:
    def cell(label: str, encoder: str, c: int) -> dict | None:
        return next(
            (r for r in rows if r["system"] == label and r["encoder"] == encoder and r["concurrency"] == c),
            None,
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
        peer = r["system"] == NAIVE or "txtai" in r["system"]
        cost = costs.get("torch", {}) if peer else costs.get(r["served"], {})
        cells = []
        for c in levels:
            x = cell(*key, c)
            cells.append(f"{qps_shown(x)} ({x['p50_ms']:.1f} / {x['p99_ms']:.0f})" if x else "")
        top, base = cell(*key, levels[-1]), cell(NAIVE, "torch", levels[-1])
        ratio = f"{top['qps'] / base['qps']:.2f}x" if top and base else ""
        enc = r["encoder"] if r["encoder"] == r["served"] else f"{r['encoder']} → {r['served']}"
        nd = cost.get("ndcg@10")
        ms = cost.get("ms_per_query")
        print(
            f"| {r['system']} | {enc} | {nd if nd is not None else ''} | {f'{ms:.3f}' if ms else ''} | "
            + " | ".join(cells)
            + f" | {ratio} |"
        )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.bundles is None and not args.distractors:
        from bench.serving import corpora_load

        if args.max_ndcg_loss == "0.01":  # the single-bundle run's default; the corpora use the service's
            args.max_ndcg_loss = None
        corpora_load.run(args)
        return

    from training.data.beir import load_beir, load_queries

    bundles = args.bundles or CACHE / ("bundles" if not args.distractors else f"bundles-{args.distractors}")
    version = build_bundle_if_needed(bundles, args.distractors, args.doc_embeddings)
    # a bundle's own recorded queries where it has them: another corpus's queries would time the wrong lengths
    own = live_timing_queries(args.bundles) if args.bundles is not None else []
    queries = own or list(load_queries(require_scifact() / "queries.jsonl").values())
    levels = [int(c) for c in args.concurrency.split(",")]
    client = load_client(args.client)
    print(
        f"load generator: {client}; bundle {version}; {len(queries)} "
        f"{'queries the bundle recorded' if own else 'scifact queries'}",
        flush=True,
    )
    backends = [b for b in args.backends.split(",") if b]
    costs = encode_costs(bundles, version, [b for b in backends if b != "auto"], float(args.max_ndcg_loss))
    test_queries = list(load_beir(require_scifact(), "test").queries.values())
    if args.ceilings:
        print_ceilings(bundles, version, [b for b in backends if b != "auto"], queries)
    bodies = {
        "unique": write_wrk_bodies(queries),
        "zipf": write_wrk_bodies(zipf_replay(test_queries, 20000), "wrk_zipf.jsonl"),
        "txtai": write_wrk_bodies(queries, "wrk_txtai.jsonl", get=True),
    }
    systems = peer_systems(args.peers, bundles / version) + service_systems(args, bundles, backends)
    rows = measure(systems, args, client, bodies, queries)
    print(
        f"\nbundle {version}; load generator {client}; cells of {args.seconds:g} s, median of {args.repeat}\n"
    )
    print_table(rows, costs, levels)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"version": version, "encoders": costs, "rows": rows}, indent=2, default=str)
    )
    print(f"\nraw results: {args.out}")


if __name__ == "__main__":
    main()
