"""Scale, measured (issue 46 item 5): N vectors in the Milvus standalone server vs FAISS HNSW in the API process.

    python -m bench milvus_scale --n 1000000          # the table in docs/deploy.md ("Milvus at 1M")
    python -m bench milvus_scale --n 20000            # a few minutes: the same phases, small

One run, same vectors for both backends:
1. vectors: the cut scifact slice of bench/index/milvus_bench.py (the test queries' relevant documents and
   2,000 others, real MiniLM embeddings, cached) + N synthetic distractors from index_bench's seeded
   Gaussian mixture fitted to them; distractors carry a one-line text, so the docstore stays small;
2. FAISS: build_bundle with the HNSW index plan a user gets past the flat threshold (`--index hnsw`, tuned
   to the project's recall target on half the test queries), published with BundleStore; served by one
   uvicorn process of app.main, whose resident memory (VmRSS) is read once it is ready;
3. Milvus: the standalone server (bench/harness/milvus.py, data in a temp folder) gets the same vectors
   through training.export.milvus_build (its HNSW parameters, the same tuning queries; insert + flush,
   index + load and tuning are timed by the builder itself), published with the MilvusPointer, served with
   SEARCH_INDEX_BACKEND=milvus by one API process, then by two on the same server; memory: the server's
   whole process tree (VmRSS summed) and each API process;
4. recall@10 against exact search over the same vectors, measured on what POST /search returns: the other
   half of the test queries' vectors and fresh mixture draws, sent as `vectors` (dense, top_k 10);
5. p50/p99 and requests/s of POST /search with scifact's test query texts (the torch query encoder runs per
   request, query cache off), closed loop at 1 and 32 clients (wrk when installed, else the harness's
   httpx client, which shares the cores); the two replicas get half the clients each (at "1 client" one
   client each, so 2), each replica's own connections;
6. prints the table and writes bench/results/milvus_scale_<n>.json and .txt.

Each finished phase is recorded in var/bench/milvus_scale_<n>/state.json (and the FAISS bundle kept there), so
a rerun after a crash redoes only the unfinished phases (`--fresh` starts over).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

from bench.harness.memory import status_bytes
from bench.harness.milvus import group_pids, milvus_standalone_process
from bench.harness.paths import CACHE, RESULTS, SCIFACT
from bench.harness.ports import free_port
from bench.harness.profiling import stat_cpu_s
from bench.harness.servers import APP, service_env, start_server, stop_server, uvicorn_cmd
from bench.harness.wrk import drive, drive_wrk, write_wrk_bodies
from bench.index.index_bench import mixture_sampler
from bench.index.milvus_bench import scifact_slice, slice_data, slice_texts
from contract.atomic import write_json_atomic
from contract.bundles.bundle import IDS_FILE, read_manifest
from contract.index.backend import MILVUS_EXTRAS, BackendConfig
from contract.jobs.plan import IndexPlan
from training.bundle.build import BuildOptions, build_bundle
from training.data.retrieval_data import Document
from training.export.shards import exact_top_k

K = 10
MILVUS_NAME = "scale"
ENCODER = "torch"  # the packaged model's own encoder: the bundles carry no ONNX export (none is built here)


def rss_mb(pid: int) -> float:
    try:
        return status_bytes(str(pid), "VmRSS") / 2**20
    except OSError:  # gone meanwhile
        return 0.0


def tree_rss_mb(group: int) -> float:
    """VmRSS summed over the processes of one process group."""
    return sum(rss_mb(pid) for pid in group_pids(group))


def tree_cpu_s(group: int) -> float:
    """CPU seconds (user + system) used so far by the processes of one process group."""
    seconds = 0.0
    for pid in group_pids(group):
        with contextlib.suppress(OSError):
            seconds += stat_cpu_s(f"/proc/{pid}/stat")
    return seconds


class Run:
    """The work folder, its vectors and the phases already done (state.json)."""

    def __init__(self, work: Path, fresh: bool):
        if fresh and work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True, exist_ok=True)
        self.work, self.path = work, work / "state.json"
        self.state: dict = json.loads(self.path.read_text()) if self.path.exists() else {}

    def phase(self, name: str, fn: Callable[[], dict]) -> dict:
        if name in self.state:
            print(f"[{name}] done before, kept", flush=True)
            return self.state[name]
        t0 = time.perf_counter()
        self.state[name] = fn() | {"phase_s": round(time.perf_counter() - t0, 1)}
        write_json_atomic(self.path, self.state, indent=1)
        print(f"[{name}] {time.perf_counter() - t0:.0f} s", flush=True)
        return self.state[name]


def make_vectors(run: Run, n: int, data_dir: Path, clusters: int, n_mix: int) -> dict:
    """The slice's real vectors + n mixture distractors (vectors.npy), the queries (queries.npz)."""
    docs, queries = scifact_slice(data_dir)
    sample = mixture_sampler(np.concatenate([docs, queries]), clusters, seed=0)
    rng = np.random.default_rng(1)
    x = np.lib.format.open_memmap(run.work / "vectors.npy", "w+", np.float32, (len(docs) + n, docs.shape[1]))
    x[: len(docs)] = docs
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        x[len(docs) + start : len(docs) + start + m] = sample(m, rng)
    x.flush()
    mix = sample(n_mix, rng)
    tune, held = queries[: len(queries) // 2], queries[len(queries) // 2 :]
    t0 = time.perf_counter()
    truth_real = exact_top_k(x, held, K, "ip")
    truth_mix = exact_top_k(x, mix, K, "ip")
    exact_s = time.perf_counter() - t0
    np.savez(
        run.work / "queries.npz", tune=tune, held=held, mix=mix, truth_real=truth_real, truth_mix=truth_mix
    )
    return {"n_real": len(docs), "n_synthetic": n, "dim": int(x.shape[1]), "exact_s": round(exact_s, 1)}


def corpus_of(data_dir: Path, n: int) -> dict[str, Document]:
    data = slice_data(data_dir)
    texts = slice_texts(data)
    corpus = {i: Document(i, "", t, {}) for i, t in zip(data.corpus, texts, strict=True)}
    for i in range(n):
        corpus[f"distractor-{i}"] = Document(f"distractor-{i}", "", f"synthetic distractor {i}", {})
    return corpus


def build(run: Run, corpus: dict[str, Document], bundles: Path, milvus: BackendConfig | None) -> dict:
    """build_bundle + publish through the project's path; FAISS in the bundle, or Milvus through its builder."""
    from contract.encoding.encoder import Encoder
    from training.bundle.store import BundleStore
    from training.export.milvus_build import milvus_builder

    encoder = Encoder.load()
    x = np.load(run.work / "vectors.npy", mmap_mode="r")
    tune = np.load(run.work / "queries.npz")["tune"]
    builder = None
    if milvus is not None:
        builder = milvus_builder(milvus, corpus, metric=encoder.index_metric, index_kind="hnsw")
    staging = bundles.parent / f"staging-{bundles.name}"
    shutil.rmtree(staging, ignore_errors=True)
    t0 = time.perf_counter()
    build_bundle(
        encoder,
        corpus,
        staging_dir=staging,
        doc_embeddings=x,
        build=BuildOptions(
            index=IndexPlan(kind="hnsw"), tune_queries=tune, show_progress=False, index_builder=builder
        ),
    )
    built = time.perf_counter() - t0
    pointer = None
    if milvus is not None:
        from contract.milvus.pointer import MilvusPointer

        pointer = MilvusPointer(milvus)
    t0 = time.perf_counter()
    version = BundleStore(bundles, pointer=pointer).publish(staging, force=True).version
    published = time.perf_counter() - t0
    manifest = read_manifest(bundles / version)
    index = manifest.index
    out = {
        "version": version,
        "bundle_s": round(built, 1),
        "publish_s": round(published, 1),
        "index_s": index.build_seconds,
        "factory": index.factory,
        "params": index.params,
        "tuned_recall": index.recall_at_10,
    }
    if milvus is not None:
        out["milvus_steps_s"] = manifest.extras[MILVUS_EXTRAS].get("step_seconds")
        out["milvus_index"] = index_state(milvus, manifest.extras[MILVUS_EXTRAS]["collection"])
    return out


def index_state(config: BackendConfig, collection: str) -> dict:
    """The server's own account of the vector index: built for every row, or still pending (then some
    searches scan unindexed segments)."""
    from contract.milvus.index import connect

    client = connect(config)
    keys = ("state", "total_rows", "indexed_rows", "pending_index_rows")
    return {
        k: d.get(k)
        for n in client.list_indexes(collection)
        for d in [client.describe_index(collection, n)]
        for k in keys
    }


def api_recall(url: str, ids: list[str], queries: np.ndarray, truth: np.ndarray) -> float:
    """recall@10 of what POST /search returns for these query vectors against the exact top-10."""
    pos = {d: i for i, d in enumerate(ids)}
    found = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for start in range(0, len(queries), 50):
            body = {"vectors": queries[start : start + 50].tolist(), "top_k": K, "mode": "dense"}
            r = client.post("/search", json=body)
            r.raise_for_status()
            found += [[pos[h["id"]] for h in res["hits"]] for res in r.json()["results"]]
    return float(np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth.tolist(), strict=True)]))


def server_timings(url: str, texts: list[str]) -> dict:
    """The server's own timings (response `timings`) of one query at a time: the index search apart from
    the encoder and HTTP, medians and 99th percentiles in ms."""
    got: dict[str, list[float]] = {"encode_ms": [], "search_ms": [], "total_ms": []}
    with httpx.Client(base_url=url, timeout=120) as client:
        for t in texts:
            r = client.post("/search", json={"query": t, "top_k": K})
            r.raise_for_status()
            for k, v in got.items():
                v.append(r.json()["timings"][k])
    return {f"{k}_p{p}": round(float(np.percentile(v, p)), 2) for k, v in got.items() for p in (50, 99)}


def load(urls: list[str], texts: list[str], clients: int, seconds: float, client: str) -> dict:
    """Closed-loop POST /search at `clients` in all, split evenly over `urls` (one driver each, run at once)."""
    per = max(1, clients // len(urls))
    if client == "wrk":
        from concurrent.futures import ThreadPoolExecutor

        bodies = write_wrk_bodies(texts, name="milvus_scale_bodies.jsonl")
        with ThreadPoolExecutor(len(urls)) as pool:
            runs = list(pool.map(lambda u: drive_wrk(u + "/search", bodies, per, seconds, 10**7), urls))
    else:

        async def all_at_once() -> list[dict]:
            return list(await asyncio.gather(*(drive(u, texts, per, seconds, 10**7) for u in urls)))

        runs = asyncio.run(all_at_once())
    return {
        "clients": per * len(urls),
        "qps": round(sum(r["qps"] for r in runs), 1),
        # per driver percentiles: the worse of them (the drivers see the same mix of queries)
        "p50_ms": round(max(r["p50_ms"] for r in runs), 1),
        "p99_ms": round(max(r["p99_ms"] for r in runs), 1),
        "errors": sum(r["errors"] for r in runs),
        "n": sum(r["n"] for r in runs),
    }


def serve_and_measure(
    run: Run,
    bundles: Path,
    extra_env: dict[str, str],
    replicas: int,
    args: argparse.Namespace,
    measure_recall: bool,
) -> dict:
    env = service_env(bundles, ENCODER, microbatch=True, SEARCH_QUERY_CACHE_SIZE="0", **extra_env)
    procs, urls = [], []
    try:
        for r in range(replicas):
            port = free_port()
            log = run.work / f"api-{bundles.name}-{replicas}-{r}.log"
            t0 = time.perf_counter()
            procs.append(start_server(uvicorn_cmd(APP, port), env, port, log=log))
            urls.append(f"http://127.0.0.1:{port}")
            print(f"  API {r + 1}/{replicas} ready in {time.perf_counter() - t0:.0f} s", flush=True)
        out: dict = {"api_rss_mb": [round(rss_mb(p.pid)) for p in procs]}
        if measure_recall:
            q = np.load(run.work / "queries.npz")
            ids = json.loads((bundles / read_current(bundles) / IDS_FILE).read_text())
            out["recall_real"] = api_recall(urls[0], ids, q["held"], q["truth_real"])
            out["recall_mix"] = api_recall(urls[0], ids, q["mix"], q["truth_mix"])
            del ids
        texts = list(slice_data(args.data).queries.values())
        for u in urls:  # warm-up: the first requests load lazily initialised parts
            for t in texts[:5]:
                httpx.post(u + "/search", json={"query": t, "top_k": K}, timeout=120)
        out["server_ms"] = server_timings(urls[0], texts[5:205])
        out["load"] = {}
        for c in args.concurrency:
            out["load"][str(c)] = load(urls, texts, c, args.seconds, args.client)
            print(f"  {replicas} API x {c} clients: {out['load'][str(c)]}", flush=True)
        out["api_rss_after_mb"] = [round(rss_mb(p.pid)) for p in procs]
        return out
    finally:
        for p in procs:
            stop_server(p)


def read_current(bundles: Path) -> str:
    from training.bundle.store import BundleStore

    version = BundleStore(bundles).current_version()
    if version is None:
        raise SystemExit(f"{bundles}: no live bundle")
    return version


def milvus_phases(run: Run, corpus_fn: Callable[[], dict[str, Document]], args: argparse.Namespace) -> None:
    """Build, serve with 1 and 2 API processes, on one standalone server (one unit: the server is gone after)."""
    needed = [p for p in ("milvus_build", "milvus_api1", "milvus_api2") if p not in run.state]
    if not needed:
        return
    for p in ("milvus_build", "milvus_api1", "milvus_api2"):
        run.state.pop(p, None)  # a new server has none of the collections: redo all three
    bundles = run.work / "milvus-bundles"
    shutil.rmtree(bundles, ignore_errors=True)
    with (
        tempfile.TemporaryDirectory(prefix="milvus-scale-") as tmp,
        milvus_standalone_process(Path(tmp)) as server,
    ):
        group = server.proc.pid
        config = BackendConfig(backend="milvus", milvus_uri=server.uri, milvus_name=MILVUS_NAME)
        idle = tree_rss_mb(group)
        env = {
            "SEARCH_INDEX_BACKEND": "milvus",
            "SEARCH_MILVUS_URI": server.uri,
            "SEARCH_MILVUS_NAME": MILVUS_NAME,
        }

        def build_it() -> dict:
            corpus = corpus_fn()
            out = build(run, corpus, bundles, config)
            return out | {"server_idle_rss_mb": round(idle), "server_rss_mb": round(tree_rss_mb(group))}

        run.phase("milvus_build", build_it)

        def api(replicas: int) -> Callable[[], dict]:
            def measure() -> dict:
                collection = read_manifest(bundles / read_current(bundles)).extras[MILVUS_EXTRAS][
                    "collection"
                ]
                before = index_state(config, collection)
                busy = tree_cpu_s(group)
                time.sleep(10)
                before["server_cpu_idle_pct"] = round((tree_cpu_s(group) - busy) * 10, 1)
                out = serve_and_measure(run, bundles, env, replicas, args, measure_recall=replicas == 1)
                return out | {"server_rss_mb": round(tree_rss_mb(group)), "index_before": before}

            return measure

        run.phase("milvus_api1", api(1))
        run.phase("milvus_api2", api(2))


def idle_cpu(cell: dict) -> str:
    return str(cell.get("index_before", {}).get("server_cpu_idle_pct", "not measured"))


def ms(cell: dict) -> str:
    t = cell["server_ms"]
    return f"{t['search_ms_p50']:.1f} / {t['search_ms_p99']:.1f}"


def table(state: dict, args: argparse.Namespace) -> str:
    vec, fb, mb = state["vectors"], state["faiss_build"], state["milvus_build"]
    f1, m1, m2 = state["faiss_api1"], state["milvus_api1"], state["milvus_api2"]
    n = vec["n_real"] + vec["n_synthetic"]
    lines = [
        f"{n:,} vectors (d = {vec['dim']}: {vec['n_real']:,} real scifact + {vec['n_synthetic']:,} mixture), "
        f"HNSW M=32 both, tuned to recall {args.target_note}",
        "",
        "| | FAISS HNSW (in the API process) | Milvus standalone, 1 API | Milvus standalone, 2 APIs |",
        "|---|---:|---:|---:|",
        f"| index | {fb['factory']} {fb['params']} | {mb['factory']} {mb['params']} | same collection |",
        f"| build (vectors to a published bundle), s | {fb['bundle_s'] + fb['publish_s']:.0f} | "
        f"{mb['bundle_s'] + mb['publish_s']:.0f} | — |",
        f"| of it: index build + tuning, s | {fb['index_s']:.0f} | {mb['index_s']:.0f} "
        f"(insert {mb['milvus_steps_s']['insert']:.0f}, index+load {mb['milvus_steps_s']['index_load']:.0f}, "
        f"tune {mb['milvus_steps_s']['tune']:.0f}) | — |",
        f"| API process RSS after load, MB | {f1['api_rss_mb'][0]} | {m1['api_rss_mb'][0]} | "
        f"{' + '.join(map(str, m2['api_rss_mb']))} |",
        f"| Milvus server RSS (process tree), MB | — | {m1['server_rss_mb']} (idle {mb['server_idle_rss_mb']}) | "
        f"{m2['server_rss_mb']} |",
        f"| Milvus server CPU in the 10 s before the API starts, % of a core | — | {idle_cpu(m1)} | {idle_cpu(m2)} |",
        f"| server-side index search, 1 query at a time: p50 / p99 ms | {ms(f1)} | {ms(m1)} | {ms(m2)} |",
        f"| server-side query encoding: p50 ms | {f1['server_ms']['encode_ms_p50']:.1f} | "
        f"{m1['server_ms']['encode_ms_p50']:.1f} | {m2['server_ms']['encode_ms_p50']:.1f} |",
        f"| recall@10 via the API, held-out test queries | {f1['recall_real']:.3f} | {m1['recall_real']:.3f} | same |",
        f"| recall@10 via the API, mixture queries | {f1['recall_mix']:.3f} | {m1['recall_mix']:.3f} | same |",
    ]
    for c in args.concurrency:
        cells = [r["load"][str(c)] for r in (f1, m1, m2)]
        lines.append(
            f"| {c} client(s): p50 / p99 ms, req/s | "
            + " | ".join(
                f"{x['p50_ms']:.0f} / {x['p99_ms']:.0f}, {x['qps']:.1f}"
                + (f" ({x['clients']} clients)" if x["clients"] != c else "")
                + (f", {x['errors']} errors" if x["errors"] else "")
                for x in cells
            )
            + " |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--n", type=int, default=1_000_000, help="synthetic distractors (the real slice comes on top)"
    )
    ap.add_argument("--data", type=Path, default=SCIFACT, help="the scifact BEIR folder")
    ap.add_argument("--clusters", type=int, default=256, help="mixture components (as milvus_bench)")
    ap.add_argument("--mix-queries", type=int, default=300, help="fresh mixture queries that measure recall")
    ap.add_argument("--seconds", type=float, default=20.0, help="duration of each load cell")
    ap.add_argument("--concurrency", default="1,32")
    ap.add_argument("--client", choices=["auto", "wrk", "httpx"], default="auto")
    ap.add_argument("--work", type=Path, default=None, help="phase state and bundles (default var/bench/...)")
    ap.add_argument("--fresh", action="store_true", help="forget the phases a previous run finished")
    args = ap.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.client = args.client if args.client != "auto" else ("wrk" if shutil.which("wrk") else "httpx")
    from contract.defaults import TARGET_RECALL

    args.target_note = TARGET_RECALL
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = Run(args.work or CACHE / f"milvus_scale_{args.n}", args.fresh)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()
    run.phase("vectors", lambda: make_vectors(run, args.n, args.data, args.clusters, args.mix_queries))

    @functools.cache
    def corpus() -> dict[str, Document]:  # built once, and only if a build phase is left to run
        return corpus_of(args.data, args.n)

    faiss_bundles = run.work / "faiss-bundles"
    if "faiss_build" not in run.state:
        shutil.rmtree(faiss_bundles, ignore_errors=True)
    run.phase("faiss_build", lambda: build(run, corpus(), faiss_bundles, None))
    run.phase("faiss_api1", lambda: serve_and_measure(run, faiss_bundles, {}, 1, args, measure_recall=True))
    milvus_phases(run, corpus, args)
    corpus.cache_clear()  # a million Documents
    text = table(run.state, args)
    machine = (
        f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
        f"load average {load_before[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
        f"load generator {args.client}; {platform.python_version()}"
    )
    text += f"\n\n{machine}; phases (s): " + ", ".join(f"{k} {v['phase_s']}" for k, v in run.state.items())
    print("\n" + text, flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"n": args.n, "started": started, "args": {k: str(v) for k, v in vars(args).items()}}
    record |= {"machine": machine, "phases": run.state}
    (RESULTS / f"milvus_scale_{args.n}.json").write_text(json.dumps(record, indent=1) + "\n")
    cmd = " ".join(["python -m bench milvus_scale", *(sys.argv[1:] if argv is None else argv)])
    (RESULTS / f"milvus_scale_{args.n}.txt").write_text(f"$ {cmd}\n\n{text}\n")


if __name__ == "__main__":
    main()
