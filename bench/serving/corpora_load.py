"""`python -m bench load_bench`'s default run: the serving table for each of the three corpora, in one run.

For each corpus of bench/harness/corpora.py (scifact, pydocs, manpages; a missing source is skipped with a line
saying so) it builds once (cached under var/bench/corpora/<name>/bundles) the bundle a user of the
pipeline gets from the base model: `python -m training index` (flat index, BM25 + fusion tuned on the
validation carve, ONNX fp32 + int8) plus the distillation step with DistillConfig's current defaults
(`--variants`, default static; redone when the defaults change). Then:

- in process, each query encoder's ms per query and its recorded test nDCG@10, the routing record of the
  static tower (share routed at the budget, nDCG recovered), and what `auto` picks at the budget;
- closed-loop load with wrk at 1, 8 and 32 clients, the corpus's test queries round robin, query cache
  off, for: the naive app (bench/serving/naive_app.py: FastAPI + torch per request + FAISS flat); this service
  as `python -m app.serve` starts it (workers and threads chosen, app/engine/serving_plan.py) in its
  default mode (the bundle's, hybrid when it won on validation) and in dense mode; the same default mode
  in one process (SEARCH_WORKERS=1), to show what the second process buys;
- on the default-mode server, --mode-pairs alternated pairs of cells at 32 clients, default mode then dense
  (then dense then default, ...): the hybrid/dense ratio the targets line uses, since two separate server
  starts differ by more than the gap between the modes;
- the naive app and the default-mode server started side by side, --naive-pairs alternated pairs of cells
  at 32 clients: the ×naive ratio and p99 the targets line gives beside the separate cells' (the same
  layout started twice differed by 1.3× in one run: bench/harness/paired_cells.py).

It prints one table per corpus (req/s with p50 / p99, ×naive at 32 clients) and the issue's targets
against it, and writes everything to bench/results/load_bench_corpora.json. Client and server share the
machine's cores; ratios against the naive app in the same run are the result.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.harness.corpora import CORPORA, EMBEDDINGS, ROOT, Corpus, data_dir
from bench.harness.paired_cells import Cell, alternated, median_ratio
from bench.harness.paths import RESULTS
from bench.harness.ports import free_port
from bench.harness.servers import (
    NAIVE_APP,
    on_port,
    serve_cmd,
    settle_workers,
    start_server,
    stop_server,
    uvicorn_cmd,
)
from bench.harness.wrk import drive_wrk, median_run, qps_shown
from contract.jobs.plan import DataPlan, IndexPlan, PublicationPlan, PublishPlan
from training.train.run_hooks import RunHooks

LEVELS = (1, 8, 32)
NAIVE = "naive FastAPI + torch + FAISS flat"
DEFAULT = "this service, default mode"


def corpus_bundle(corpus: Corpus, folder: Path, variants: list[str]) -> Path:
    """The corpus's bench bundles folder, with a live bundle carrying the current recipe's encoders."""
    from training.bundle.store import BundleStore
    from training.data.beir import load_beir
    from training.distill.bundle_step import distill_live_bundle
    from training.distill.config import DistillConfig
    from training.eval.embedding_cache import EmbeddingCache
    from training.publish.index_model import index_model

    bundles = ROOT / corpus.name / "bundles"
    store = BundleStore(bundles)
    if store.current_version() is None:
        print(f"{corpus.name}: building the bench bundle (once)", flush=True)
        index_model(
            None,
            PublishPlan(
                data=DataPlan(data_dir=str(folder)),
                index=IndexPlan(kind="flat"),
                publication=PublicationPlan(bundles_dir=str(bundles), force=True, distill=False),
            ),
            RunHooks(cache=EmbeddingCache(EMBEDDINGS), show_progress=False),
        )
    config = DistillConfig(variants=variants)
    manifest = json.loads((store.version_path(str(store.current_version())) / "manifest.json").read_text())
    recorded = (manifest["extras"].get("query_encoders") or {}).get("config")
    if recorded != config.model_dump(mode="json"):
        print(f"{corpus.name}: distilling {variants} with the current recipe", flush=True)
        started = time.perf_counter()
        distill_live_bundle(
            bundles, load_beir(folder, "train"), load_beir(folder, "test"), config=config, force=True
        )
        print(f"{corpus.name}: distilled in {time.perf_counter() - started:.0f} s", flush=True)
    return bundles


def encoders(bundles: Path, queries: list[str], max_loss: float) -> dict[str, Any]:
    """In process: every backend's ms per query and recorded test nDCG@10, routing, and auto's choice."""
    from app.engine.encoder_choice import (
        choose_encoder_backend,
        load_encoder_backend,
        recorded_ndcg_losses,
        time_encoder,
    )
    from contract.bundles.bundle import load_bundle
    from contract.encoding.routing import operating_point, routing_record
    from training.bundle.store import BundleStore

    store = BundleStore(bundles)
    bundle = load_bundle(store.version_path(str(store.current_version())), mmap=True)
    extras = bundle.manifest.extras
    onnx = (extras.get("onnx") or {}).get("ndcg@10") or {}
    record = extras.get("query_encoders") or {}
    ndcg = {"torch": onnx.get("torch"), "onnx": onnx.get("fp32"), "onnx-int8": onnx.get("int8")}
    ndcg |= {k: v["ndcg@10"] for k, v in (record.get("variants") or {}).items()}
    out: dict[str, Any] = {"backends": {}}
    for name, loss in sorted(recorded_ndcg_losses(bundle).items()):
        ms = time_encoder(load_encoder_backend(bundle, name), queries[:100])
        out["backends"][name] = {"ms_per_query": round(ms, 4), "ndcg@10": ndcg.get(name), "ndcg_loss": loss}
    routing = routing_record(extras, "static")
    if routing is not None:
        point = operating_point(routing, max_loss)
        full = (record.get("full") or {}).get("ndcg@10")
        alone = ndcg.get("static")
        out["routing"] = {
            "budget": max_loss,
            "static_alone": alone,
            "full": full,
            "point": point,
            "recovered": round((point["ndcg@10"] - alone) / (full - alone), 3)
            if point and full is not None and alone is not None and full > alone
            else None,
        }
    chosen, _, choice = choose_encoder_backend(bundle, max_ndcg_loss=max_loss)
    out["auto"] = {"chosen": chosen, "candidates": choice["candidates"]}
    out["full_test"] = {k: v for k, v in bundle.manifest.metrics.items() if k.startswith("test")}
    out["default_mode"] = (extras.get("retrieval") or {}).get("default_mode", "dense")
    bundle.docstore.close()
    return out


def bodies(queries: list[str], name: str, mode: str | None) -> Path:
    path = ROOT / "wrk" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"query": q, "top_k": 10} | ({"mode": mode} if mode else {})) for q in queries]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def run_corpus(corpus: Corpus, args: Any) -> dict[str, Any] | None:
    """Build, time and load one corpus; returns its rows (None when its source is missing)."""
    from training.bundle.store import BundleStore
    from training.data.beir import load_beir

    folder = data_dir(corpus)
    if folder is None:
        return None
    variants = [v for v in args.variants.split(",") if v]
    bundles = corpus_bundle(corpus, folder, variants)
    version = str(BundleStore(bundles).current_version())
    queries = [q for q in load_beir(folder, "test").queries.values() if q.strip()]
    max_loss = float(args.max_ndcg_loss) if args.max_ndcg_loss else 0.005
    enc = encoders(bundles, queries, max_loss)
    print(f"\n== {corpus.name} ({corpus.kind}): {len(queries)} test queries, bundle {version}", flush=True)
    print_encoders(enc, max_loss)
    systems = corpus_systems(corpus, bundles / version, queries, args.max_ndcg_loss, args.corpora_encoder)
    # the default-mode server also runs alternated pairs against dense's bodies (mode_pairs)
    dense_bodies = next(b for label, _, _, b in systems if label == "this service, dense")
    pair = dense_bodies if enc["default_mode"] != "dense" and args.mode_pairs else None
    rows = [
        row
        for system in systems
        for row in load_system(
            *system, enc["default_mode"], args, pair_with=pair if system[0] == DEFAULT else None
        )
    ]
    return {
        "corpus": corpus.name,
        "version": version,
        "encoders": enc,
        "rows": rows,
        "naive_pairs": naive_pairs(systems, args) if args.naive_pairs else None,
        "load_after": os.getloadavg(),
    }


def print_encoders(enc: dict[str, Any], max_loss: float) -> None:
    for name, b in enc["backends"].items():
        print(
            f"  {name:10s} {b['ms_per_query']:8.3f} ms/query  nDCG@10 {b['ndcg@10']}  loss {b['ndcg_loss']:+.4f}"
        )
    if "routing" in enc:
        r = enc["routing"]
        p = r["point"]
        where = f"share {p['share']:.3f} routed, nDCG@10 {p['ndcg@10']:.4f}" if p else "no share meets it"
        print(
            f"  routing at budget {r['budget']}: static alone {r['static_alone']}, full {r['full']}; {where}; "
            f"recovered {r['recovered']}"
        )
    print(
        f"  auto at budget {max_loss}: {enc['auto']['chosen']}; default mode {enc['default_mode']}",
        flush=True,
    )


def corpus_systems(
    corpus: Corpus, bundle: Path, queries: list[str], max_ndcg_loss: str | None, encoder: str = "auto"
) -> list[tuple[str, list[str], dict[str, str], Path]]:
    """(label, command, env, bodies) of the naive app and of this service's three layouts on one bundle."""
    loss_env = {"SEARCH_MAX_NDCG_LOSS": max_ndcg_loss} if max_ndcg_loss else {}
    base_env = {
        **os.environ,
        "SEARCH_BUNDLES_DIR": str(bundle.parent),
        "SEARCH_ENCODER_BACKEND": encoder,
        "SEARCH_RELOAD_POLL_SECONDS": "0",
        "SEARCH_QUEUE_MAX": "4096",
        "SEARCH_LOG_LEVEL": "WARNING",
        "SEARCH_QUERY_CACHE_SIZE": "0",
        **loss_env,
    }
    base_env.pop("SEARCH_API_KEY", None)
    base_env.pop("OMP_NUM_THREADS", None)  # the service chooses its own threads
    default_bodies = bodies(queries, f"{corpus.name}-default", None)
    return [
        (
            NAIVE,
            uvicorn_cmd(NAIVE_APP, 0, factory=True),
            {**os.environ, "NAIVE_BUNDLE": str(bundle)},
            default_bodies,
        ),
        (DEFAULT, serve_cmd(), base_env, default_bodies),
        ("this service, dense", serve_cmd(), base_env, bodies(queries, f"{corpus.name}-dense", "dense")),
        (
            "this service, default mode, 1 process",
            serve_cmd(),
            {**base_env, "SEARCH_WORKERS": "1"},
            default_bodies,
        ),
    ]


def load_system(
    label: str,
    cmd: list[str],
    env: dict[str, str],
    body_file: Path,
    default_mode: str,
    args: Any,
    *,
    pair_with: Path | None = None,
) -> list[dict[str, Any]]:
    """One system on its own port under wrk at each level; its rows (the top one with `mode_pairs` of
    its bodies against `pair_with`'s, when given)."""
    port = free_port()
    started = time.perf_counter()
    proc = start_server(on_port(cmd, port), env, port, "/readyz")
    rows = []
    try:
        url = f"http://127.0.0.1:{port}"
        served, serving, mode = "torch", None, None
        if label != NAIVE:
            listing = _settle(url, started)
            served, serving = listing["encoder_backend"], listing.get("serving")
            mode = "dense" if "dense" in label else default_mode
        drive_wrk(url, body_file, 8, 1, 10_000)  # warm-up
        for c in LEVELS:
            runs = [drive_wrk(url, body_file, c, args.seconds, args.max_requests) for _ in range(args.repeat)]
            r = {"system": label, "served": served, "mode": mode, "concurrency": c, **median_run(runs)}
            if serving:
                r["workers"], r["threads"] = serving.get("workers"), serving.get("encoder_threads")
            rows.append(r)
            print(
                f"  {label:40s} {served:14s} c={c:<3d} {qps_shown(r):>8s} req/s  p50 {r['p50_ms']:7.2f} ms  "
                f"p99 {r['p99_ms']:7.2f} ms  n={r['n']} errors={r['errors']}",
                flush=True,
            )
        if pair_with is not None:
            rows[-1]["mode_pairs"] = mode_pairs(url, body_file, pair_with, args.mode_pairs, args.seconds)
        if label != NAIVE and served.endswith("-routed"):
            listing = httpx.get(f"{url}/bundles", timeout=30).json()
            counts = (listing.get("encoder_choice") or {}).get("routing", {}).get("counts")
            print(f"  routed in this process during the run: {counts}", flush=True)
    finally:
        stop_server(proc)
    return rows


def mode_pairs(url: str, body_file: Path, dense_file: Path, pairs: int, seconds: float) -> dict[str, Any]:
    """The default mode's req/s against dense's at the top level, on this one server, in alternated
    pairs (bench/harness/paired_cells.py): separate server starts put hybrid at 1.32× dense on debpkgs
    (bench/results/load_bench_corpora_debpkgs-pycode_onnx-int8.txt), more than the gap measured."""
    runs = alternated(Cell(url, body_file), Cell(url, dense_file), pairs, LEVELS[-1], seconds)
    ratio, ratios = median_ratio(runs)
    print(
        f"  default mode / dense at c={LEVELS[-1]}, {pairs} alternated pairs on this server: median {ratio:.3f} "
        f"(pairs {', '.join(f'{x:.2f}' for x in ratios)})",
        flush=True,
    )
    return {
        "pairs": [[round(d["qps"], 1), round(e["qps"], 1)] for d, e in runs],
        "median_ratio": round(ratio, 4),
    }


def naive_pairs(systems: list[tuple[str, list[str], dict[str, str], Path]], args: Any) -> dict[str, Any]:
    """The default server against the naive app at the top level, both started side by side and driven
    in alternated pairs (bench/harness/paired_cells.py): the ×naive ratio and the p99 of the targets line
    without the drift between two cells measured minutes apart. An idle server beside the measured one
    costs it little: onnxruntime stops spinning between runs (contract/encoding/onnx_encoder.py)."""
    found = {label: (cmd, env, bodies) for label, cmd, env, bodies in systems}
    procs, cells = [], []
    try:
        for label in (NAIVE, DEFAULT):
            cmd, env, bodies = found[label]
            port, started = free_port(), time.perf_counter()
            procs.append(start_server(on_port(cmd, port), env, port, "/readyz"))
            url = f"http://127.0.0.1:{port}"
            if label == DEFAULT:
                _settle(url, started)
            drive_wrk(url, bodies, 8, 1, 10_000)  # warm-up
            cells.append(Cell(url, bodies))
        runs = alternated(cells[0], cells[1], args.naive_pairs, LEVELS[-1], args.seconds)
    finally:
        for proc in procs:
            stop_server(proc)
    ratio, ratios = median_ratio([(svc, naive) for naive, svc in runs])
    p99 = float(np.median([svc["p99_ms"] for _, svc in runs]))
    print(
        f"  default mode / naive at c={LEVELS[-1]}, {args.naive_pairs} alternated pairs, both servers up: median "
        f"{ratio:.1f}× (pairs {', '.join(f'{x:.1f}' for x in ratios)}), the default's p99 median {p99:.0f} ms",
        flush=True,
    )
    return {
        "pairs": [[round(n["qps"], 1), round(s["qps"], 1), round(s["p99_ms"], 1)] for n, s in runs],
        "median_ratio": round(ratio, 3),
        "median_p99_ms": round(p99, 1),
    }


def _settle(url: str, started: float) -> dict[str, Any]:
    """This service's GET /bundles, returned once its other workers (its `serving` plan) have loaded too."""
    listing: dict[str, Any] = httpx.get(f"{url}/bundles", timeout=30).json()
    serving = listing.get("serving")
    if serving and serving.get("workers", 1) > 1:
        settle_workers(started)
    return listing


def print_tables(results: list[dict[str, Any]]) -> None:
    for res in results:
        rows, enc = res["rows"], res["encoders"]
        print(f"\n### {res['corpus']} (bundle {res['version']})\n")
        head = " | ".join(f"c={c} req/s (p50 / p99 ms)" for c in LEVELS)
        print(
            f"| system | query encoder | mode | workers × threads | dense nDCG@10 (test) | {head} | ×naive at 32 |"
        )
        print("|---|---|---|---|---:|" + "---:|" * len(LEVELS) + "---:|")
        systems = list(dict.fromkeys(r["system"] for r in rows))

        def cell(system: str, c: int, rows: list[dict[str, Any]] = rows) -> dict[str, Any] | None:
            return next((r for r in rows if r["system"] == system and r["concurrency"] == c), None)

        base = cell(NAIVE, LEVELS[-1])
        for system in systems:
            first = cell(system, LEVELS[0]) or {}
            served = first.get("served", "")
            nd = (enc["backends"].get(served) or {}).get("ndcg@10")
            if nd is None and served.endswith("-routed") and enc.get("routing", {}).get("point"):
                nd = enc["routing"]["point"]["ndcg@10"]
            cells = []
            for c in LEVELS:
                x = cell(system, c)
                cells.append(f"{qps_shown(x)} ({x['p50_ms']:.1f} / {x['p99_ms']:.0f})" if x else "")
            top = cell(system, LEVELS[-1])
            ratio = f"{top['qps'] / base['qps']:.1f}×" if top and base else ""
            wt = f"{first.get('workers')} × {first.get('threads')}" if first.get("workers") else "1"
            print(
                f"| {system} | {served} | {first.get('mode') or 'dense'} | {wt} | "
                f"{nd if nd is not None else ''} | " + " | ".join(cells) + f" | {ratio} |"
            )
        svc, naive1 = cell(DEFAULT, LEVELS[-1]), cell(NAIVE, 1)
        svc1, dense = cell(DEFAULT, 1), cell("this service, dense", LEVELS[-1])
        one = cell("this service, default mode, 1 process", LEVELS[-1])
        if svc and base and naive1 and svc1:
            print("\n" + targets_line(svc, base, naive1, svc1, dense, one, res.get("naive_pairs")))
        static = enc["backends"].get("static")
        if static:
            print(
                f"static tower: test nDCG@10 {static['ndcg@10']} vs full {enc['backends']['torch']['ndcg@10']} "
                f"(loss {static['ndcg_loss']:+.4f}; target ≤ 0.01)"
            )


def targets_line(
    svc: dict[str, Any],
    base: dict[str, Any],
    naive1: dict[str, Any],
    svc1: dict[str, Any],
    dense: dict[str, Any] | None,
    one: dict[str, Any] | None,
    paired: dict[str, Any] | None,
) -> str:
    """Issue 42's targets against one corpus's cells (and its alternated pairs, where they ran)."""
    served = svc1.get("served", "")
    want = 30 if served.startswith("static") or served.endswith("-routed") else 15
    pairs = (
        f"; {len(paired['pairs'])} alternated pairs, both up: {paired['median_ratio']:.1f}, "
        f"p99 {paired['median_p99_ms']:.0f} ms"
        if paired
        else ""
    )
    line = (
        f"targets (issue 42): ×naive at 32 = {svc['qps'] / base['qps']:.1f} (≥ {want} with {served}); "
        f"p99 at 32 = {svc['p99_ms']:.0f} ms (≤ 60){pairs}; c=1 p50 = "
        f"{svc1['p50_ms'] / naive1['p50_ms']:.2f} of naive's (≤ 0.25)"
    )
    if one:
        line += f"; 1 process ×naive at 32 = {one['qps'] / base['qps']:.1f} (≥ 10)"
    if dense and svc.get("mode_pairs"):
        line += (
            f"; default mode / dense req/s at 32 = {svc['mode_pairs']['median_ratio']:.2f} in alternated "
            f"pairs on one server (≥ 0.90; separate starts: {svc['qps'] / dense['qps']:.2f})"
        )
    elif dense:
        line += f"; default mode / dense req/s at 32 = {svc['qps'] / dense['qps']:.2f} (≥ 0.90)"
    return line


def run(args: Any) -> None:
    """The default run of load_bench (its parsed arguments)."""
    names = args.corpora.split(",")
    print(f"load average before: {os.getloadavg()}", flush=True)
    results = []
    for corpus in [c for c in CORPORA if c.name in names]:
        res = run_corpus(corpus, args)
        if res is not None:
            results.append(res)
    print_tables(results)
    default = names == ["scifact", "pydocs", "manpages"] and args.corpora_encoder == "auto"
    out = RESULTS / (
        "load_bench_corpora.json"
        if default
        else f"load_bench_corpora_{'-'.join(names)}_{args.corpora_encoder}.json"
    )
    out.write_text(json.dumps({"results": results, "load_end": os.getloadavg()}, indent=1, default=str))
    print(f"\nload average after: {os.getloadavg()}; raw results: {out}")
