"""Many collections in one API process: how many, how fast, how much memory, and a retrain beside them.

    nice -n 10 .venv/bin/python -m bench collections_bench --prepare-only      # builds the bundles (CPU heavy)
    flock BENCH_LOCK .venv/bin/python -m bench collections_bench          # the timed part

What it builds (once, under --work; reused by later runs), from ../shared/data/scifact:

- the corpus encoded once with the packaged all-MiniLM-L6-v2 (max 128 tokens);
- N collections `c01…cN` of `--docs` documents each (a seeded sample of the corpus per collection), each a
  flat FAISS bundle of the base model as is (no fine-tuning: cheap to build), so all of them carry the
  same model files and the API loads that encoder once (contract/encoding/shared_models.py);
- K collections `d01…dK`: the same documents, each with an encoder of its own (the base model's weights
  with a different 1e-3 perturbation each, so the files and checksums differ: in memory, exactly what one
  fine-tuned encoder per collection costs; their rankings are not the point);
- a small scifact slice as the dataset of the retrain.

What it measures (real uvicorn processes on 127.0.0.1, real HTTP, query cache off):

1. every one of the N collections answers a search from one API process; the load time of each (the
   `X-Collection-Load-Ms` of its first request) and the resident memory after 1, 2, 5, 10, N loaded;
2. the same for the K distinct-encoder collections (resident memory vs number loaded: the table);
3. search p50 on a loaded collection of the N-collection server vs a server of that one bundles folder
   alone (interleaved blocks of sequential queries, the same queries);
4. first search on an evicted collection (SEARCH_MAX_LOADED_COLLECTIONS=4): the server-reported load time
   and the client's latency, vs a warm search on it;
5. a retrain job of collection c01 (worker subprocess, `--nice 0` and `--nice 10`) while collection c02
   serves 8 concurrent clients: c02's p50/p99 quiet vs during the job's training.

Numbers go to stdout (tables) and bench/results/collections_bench.json. Load averages are printed with
them: on the shared 2-core machine they decide how much the absolute numbers mean.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.harness.paths import REPO, RESULTS, require_scifact
from bench.harness.ports import free_port
from contract.jobs.plan import IndexPlan
from training.bundle.build import BuildOptions, BundleRecord

KEY = "collections-bench"
RETRAIN = {"epochs": 3, "max_seq_length": 64, "batch_size": 16, "onnx": False, "eval_max_queries": 20}


def load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# -- building ------------------------------------------------------------------------------------------
def corpus_embeddings(work: Path, encoder: Any, data: Any) -> np.ndarray:
    """The scifact corpus encoded once (cached in work/corpus_emb.npy), (n_docs, dim)."""
    from contract.encoding.encoder import document_text

    emb_file = work / "corpus_emb.npy"
    if not emb_file.exists():
        started = time.perf_counter()
        texts = [document_text(d.title, d.text) for d in data.corpus.values()]
        emb = encoder.encode(texts, kind="document", batch_size=32, show_progress=True)
        np.save(emb_file, emb)
        print(f"encoded {len(texts)} documents in {time.perf_counter() - started:.0f} s", flush=True)
    return np.load(emb_file)


def build_collection(
    work: Path, root: Path, name: str, seed: int, enc: Any, data: Any, emb: np.ndarray, n_docs: int
) -> Path:
    """One collection of n_docs seeded scifact documents (built once; kept when it already serves)."""
    from contract.bundles.collections import Collections
    from training.bundle.build import build_bundle
    from training.bundle.store import BundleStore

    collections = Collections(None, root)
    if collections.exists(name) and (collections.folder(name) / "CURRENT").exists():
        return collections.folder(name)
    folder = collections.folder(name) if collections.exists(name) else collections.create(name)
    ids = list(data.corpus)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(ids), size=min(n_docs, len(ids)), replace=False))
    corpus = {ids[i]: data.corpus[ids[i]] for i in pick}
    staged = build_bundle(
        enc,
        corpus,
        staging_dir=work / "staging" / name,
        doc_embeddings=emb[pick],
        record=BundleRecord(metrics={"test": {"ndcg@10": 0.5}}),
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )
    BundleStore(folder).publish(staged, force=True)
    return folder


def perturbed(encoder: Any, seed: int) -> Any:
    """A copy of the encoder with seeded noise on its weights: another encoder identity."""
    import copy

    import torch

    other = copy.deepcopy(encoder)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 1e-3)
    return other


def prepare(work: Path, n: int, k: int, n_docs: int) -> None:
    from contract.encoding.encoder import Encoder
    from training.data.beir import load_beir
    from training.data.beir_slice import beir_slice

    data = load_beir(require_scifact(), "test")
    encoder = Encoder.load()
    encoder.model.max_seq_length = 128
    emb = corpus_embeddings(work, encoder, data)
    if not (work / "data" / "mini").exists():
        beir_slice(require_scifact(), work / "data" / "mini", n_train=40, n_test=20, n_distractors=200)
    shared_root = work / "shared" / "bundles"
    shared_root.mkdir(parents=True, exist_ok=True)
    for i in range(1, n + 1):
        build_collection(work, shared_root, f"c{i:02d}", i, encoder, data, emb, n_docs)
    distinct_root = work / "distinct" / "bundles"
    distinct_root.mkdir(parents=True, exist_ok=True)
    for i in range(1, k + 1):
        build_collection(work, distinct_root, f"d{i:02d}", i, perturbed(encoder, i), data, emb, n_docs)
    shutil.rmtree(work / "staging", ignore_errors=True)
    print(f"prepared {n} shared-encoder and {k} distinct-encoder collections under {work}", flush=True)


# -- serving -------------------------------------------------------------------------------------------
class Server:
    def __init__(self, bundles: Path, log: Path, **env: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "SEARCH_BUNDLES_DIR": str(bundles),
            "SEARCH_ENCODER_BACKEND": "torch",
            "SEARCH_QUERY_CACHE_SIZE": "0",  # every search encodes: compare the real work
            "SEARCH_RELOAD_POLL_SECONDS": "2",
            "SEARCH_QUEUE_MAX": "4096",
            "SEARCH_LOG_LEVEL": "WARNING",
            "SEARCH_API_KEY": KEY,
            **env,
        }
        self.log = log
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--log-level", "warning", "--no-access-log"]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("server not up after 600 s")
            time.sleep(0.3)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def search(client: httpx.Client, url: str, query: str) -> tuple[float, httpx.Response]:
    t0 = time.perf_counter()
    r = client.post(url, json={"query": query, "top_k": 10})
    return (time.perf_counter() - t0) * 1000, r


def load_all(server: Server, names: list[str], query: str, marks: list[int]) -> dict[str, Any]:
    """First search on each collection in turn: status, load ms, RSS after `marks` loaded."""
    out: dict[str, Any] = {"ok": 0, "load_ms": [], "first_ms": [], "rss_mb": {0: server.rss_mb()}}
    with httpx.Client(base_url=server.base, timeout=300) as client:
        for i, name in enumerate(names, 1):
            ms, r = search(client, f"/collections/{name}/search", query)
            out["ok"] += r.status_code == 200
            out["load_ms"].append(float(r.headers.get("x-collection-load-ms", "nan")))
            out["first_ms"].append(ms)
            if i in marks:
                time.sleep(1.0)
                out["rss_mb"][i] = server.rss_mb()
        listing = client.get("/collections").json()
    out["resident_bytes"] = listing["resident_bytes"]
    out["loaded"] = listing["loaded"]
    return out


def interleaved_p50(
    a: tuple[Server, str], b: tuple[Server, str], queries: list[str], block: int = 20
) -> dict:
    """Sequential searches alternating in blocks between two servers: (p50, p99) ms of each."""
    lat: dict[str, list[float]] = {"a": [], "b": []}
    clients = {k: httpx.Client(base_url=s.base, timeout=60) for k, (s, _) in {"a": a, "b": b}.items()}
    try:
        for k, (_, url) in {"a": a, "b": b}.items():
            for q in queries[:5]:  # warm-up
                search(clients[k], url, q)
        for start in range(0, len(queries), block):
            chunk = queries[start : start + block]
            for k, (_, url) in (("a", a), ("b", b)) if (start // block) % 2 == 0 else (("b", b), ("a", a)):
                for q in chunk:
                    ms, r = search(clients[k], url, q)
                    assert r.status_code == 200, r.text
                    lat[k].append(ms)
    finally:
        for c in clients.values():
            c.close()
    return {k: {"p50_ms": float(np.percentile(v, 50)), "p99_ms": float(np.percentile(v, 99)), "n": len(v)}
            for k, v in lat.items()}  # fmt: skip


async def drive(
    base: str, url: str, queries: list[str], clients: int, seconds: float, stop: Any = None
) -> dict:
    """`clients` concurrent sequential clients for `seconds` (or until stop() is true): p50, p99, req/s."""
    lat: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        end = time.perf_counter() + seconds

        async def one(offset: int) -> None:
            nonlocal errors
            i = offset
            while time.perf_counter() < end and not (stop and stop()):
                t0 = time.perf_counter()
                r = await client.post(url, json={"query": queries[i % len(queries)], "top_k": 10})
                lat.append((time.perf_counter() - t0) * 1000)
                errors += r.status_code != 200
                i += clients

        started = time.perf_counter()
        await asyncio.gather(*(one(c) for c in range(clients)))
        elapsed = time.perf_counter() - started
    arr = np.asarray(lat)
    return {
        "n": len(arr),
        "errors": errors,
        "seconds": elapsed,
        "qps": len(arr) / elapsed,
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
    }


def retrain_beside(work: Path, queries: list[str], nice: int, seconds: float) -> dict[str, Any]:
    """Collection c02 at 8 clients, quiet and while a retrain of c01 trains (worker at `nice`)."""
    root = work / "shared" / "bundles"
    queue = f"sqlite:///{work / f'jobs-nice{nice}.db'}"
    env = {"SEARCH_QUEUE_URL": queue, "SEARCH_DATA_ROOT": str(work / "data")}
    server = Server(root, work / f"retrain-api-nice{nice}.log", SEARCH_MAX_LOADED_COLLECTIONS="4", **env)
    worker = None
    try:
        with httpx.Client(base_url=server.base, timeout=300) as client:
            search(client, "/collections/c02/search", queries[0])  # load it
        quiet = asyncio.run(drive(server.base, "/collections/c02/search", queries, 8, seconds))
        log = (work / f"worker-nice{nice}.log").open("ab")
        worker = subprocess.Popen(
            [sys.executable, "-m", "training", "worker", "--queue", queue, "--nice", str(nice)],
            cwd=REPO, env=server.env | env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        with httpx.Client(base_url=server.base, timeout=60, headers={"X-API-Key": KEY}) as client:
            r = client.post(
                "/collections/c01/jobs", json={"type": "retrain", "dataset": "mini", "options": RETRAIN}
            )
            assert r.status_code == 202, r.text
            job_id = r.json()["id"]
            t0 = time.monotonic()
            while client.get(f"/jobs/{job_id}").json()["state"] == "queued":
                assert time.monotonic() - t0 < 600, "the retrain never started"
                time.sleep(0.5)
        # measured while the job runs (encoding, training, evaluating: CPU-bound throughout), ended early
        # if the job finishes first
        running = httpx.Client(base_url=server.base, timeout=60, headers={"X-API-Key": KEY})
        checked = {"at": 0.0, "done": False}

        def finished() -> bool:
            if time.monotonic() - checked["at"] > 1.0:
                checked["at"] = time.monotonic()
                checked["done"] = running.get(f"/jobs/{job_id}").json()["state"] != "running"
            return bool(checked["done"])

        busy = asyncio.run(drive(server.base, "/collections/c02/search", queries, 8, seconds, stop=finished))
        running.close()
        with httpx.Client(base_url=server.base, timeout=60, headers={"X-API-Key": KEY}) as client:
            phase_after = client.get(f"/jobs/{job_id}").json()
            while phase_after["state"] in ("queued", "running"):
                time.sleep(2)
                phase_after = client.get(f"/jobs/{job_id}").json()
        return {
            "nice": nice,
            "quiet": quiet,
            "during_retrain": busy,
            "p99_ratio": busy["p99_ms"] / quiet["p99_ms"],
            "p50_ratio": busy["p50_ms"] / quiet["p50_ms"],
            "job": {k: phase_after.get(k) for k in ("state", "live", "started_at", "finished_at")},
        }
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=60)
        server.stop()


# -- report --------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=REPO / "var" / "collections-bench")
    parser.add_argument("--collections", type=int, default=20)
    parser.add_argument("--distinct", type=int, default=8, help="collections with an encoder each")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=300, help="sequential queries per server for the p50")
    parser.add_argument("--seconds", type=float, default=20.0, help="each 8-client run")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument("--skip-retrain", action="store_true")
    return parser.parse_args(argv)


def evictions(work: Path, names: list[str], queries: list[str]) -> list[dict[str, Any]]:
    """With room for 4 collections loaded: what the first search of an evicted one costs, and a warm one."""
    evicting = Server(work / "shared" / "bundles", work / "evicting.log", SEARCH_MAX_LOADED_COLLECTIONS="4")
    rows = []
    try:
        with httpx.Client(base_url=evicting.base, timeout=300) as client:
            for name in names[:5]:  # c01 is evicted by the fifth
                search(client, f"/collections/{name}/search", queries[0])
            for i, name in enumerate(names[:6]):  # each first search here finds it evicted
                first_ms, r = search(client, f"/collections/{name}/search", queries[10 + i])
                warm_ms, _ = search(client, f"/collections/{name}/search", queries[40 + i])
                rows.append({"collection": name, "load_ms": float(r.headers.get("x-collection-load-ms", "nan")),
                             "first_ms": first_ms, "warm_ms": warm_ms})  # fmt: skip
    finally:
        evicting.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    prepare(work, args.collections, args.distinct, args.docs)
    if args.prepare_only:
        return 0
    from training.data.beir import load_beir

    queries = list(load_beir(require_scifact(), "test").queries.values())
    names = [f"c{i:02d}" for i in range(1, args.collections + 1)]
    distinct = [f"d{i:02d}" for i in range(1, args.distinct + 1)]
    marks = sorted({1, 2, 5, 10, args.collections, args.distinct})
    result: dict[str, Any] = {
        "load_avg_start": load_avg(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print(f"load average at start: {load_avg()}", flush=True)

    n = str(args.collections)
    multi = Server(work / "shared" / "bundles", work / "multi.log", SEARCH_MAX_LOADED_COLLECTIONS=n)
    single = Server(work / "shared" / "bundles" / "collections" / "c01", work / "single.log")
    try:
        result["shared"] = load_all(multi, names, queries[0], marks)
        print(
            f"searchable: {result['shared']['ok']}/{len(names)} collections from one API process", flush=True
        )
        result["p50"] = interleaved_p50(
            (multi, "/collections/c01/search"), (single, "/search"), queries[: args.queries]
        )
    finally:
        multi.stop()
        single.stop()
    d = Server(work / "distinct" / "bundles", work / "distinct.log", SEARCH_MAX_LOADED_COLLECTIONS=n)
    try:
        result["distinct"] = load_all(d, distinct, queries[0], marks)
    finally:
        d.stop()

    result["evicted"] = evictions(work, names, queries)

    if not args.skip_retrain:
        result["retrain"] = [retrain_beside(work, queries, nice, args.seconds) for nice in (0, 10)]
    result["load_avg_end"] = load_avg()

    print_tables(result, args)
    out = RESULTS / "collections_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nload average at end: {result['load_avg_end']}; results in {out.relative_to(REPO)}")
    return 0


def print_tables(r: dict[str, Any], args: argparse.Namespace) -> None:
    s, d = r["shared"], r["distinct"]
    print(
        f"\n## {s['ok']}/{args.collections} collections of {args.docs} documents searchable from one API process"
    )
    print(
        f"load time of a collection (first request): p50 {np.nanmedian(s['load_ms']):.0f} ms, "
        f"max {np.nanmax(s['load_ms']):.0f} ms (the first, {s['load_ms'][0]:.0f} ms, loads the shared encoder)"
    )
    print("\n| collections loaded | resident MB, shared base encoder | resident MB, one encoder each |")
    print("|---:|---:|---:|")
    for k in sorted(set(s["rss_mb"]) | set(d["rss_mb"])):
        a, b = s["rss_mb"].get(k), d["rss_mb"].get(k)
        print(f"| {k} | {'' if a is None else f'{a:.0f}'} | {'' if b is None else f'{b:.0f}'} |")
    print(
        f"(the registry's own measure of what is loaded: {s['resident_bytes'] / 1e6:.0f} MB shared, "
        f"{d['resident_bytes'] / 1e6:.0f} MB distinct)"
    )
    p = r["p50"]
    print("\n| server | p50 ms | p99 ms | queries |")
    print("|---|---:|---:|---:|")
    print(
        f"| {args.collections} collections loaded, /collections/c01/search | {p['a']['p50_ms']:.1f} | {p['a']['p99_ms']:.1f} | {p['a']['n']} |"
    )
    print(
        f"| c01's bundles folder alone, /search | {p['b']['p50_ms']:.1f} | {p['b']['p99_ms']:.1f} | {p['b']['n']} |"
    )
    print(f"p50 ratio multi / single: {p['a']['p50_ms'] / p['b']['p50_ms']:.3f}")
    print("\n| evicted collection | load ms (server) | first search ms (client) | warm search ms |")
    print("|---|---:|---:|---:|")
    for row in r["evicted"]:
        print(
            f"| {row['collection']} | {row['load_ms']:.0f} | {row['first_ms']:.0f} | {row['warm_ms']:.1f} |"
        )
    for row in r.get("retrain", []):
        q, b = row["quiet"], row["during_retrain"]
        print(f"\nretrain of c01 (worker --nice {row['nice']}) while c02 serves 8 clients:")
        print("| c02 at 8 clients | p50 ms | p99 ms | req/s |")
        print("|---|---:|---:|---:|")
        print(f"| quiet | {q['p50_ms']:.1f} | {q['p99_ms']:.1f} | {q['qps']:.1f} |")
        print(f"| during the retrain's training | {b['p50_ms']:.1f} | {b['p99_ms']:.1f} | {b['qps']:.1f} |")
        print(
            f"p99 ratio {row['p99_ratio']:.2f}, p50 ratio {row['p50_ratio']:.2f}; job {row['job']['state']}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
