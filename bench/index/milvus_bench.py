"""FAISS (in process) vs Milvus (milvus-lite server on loopback), same vectors, same run.

Real embeddings (cached in bench/results/): the scifact test queries, their relevant documents and
2,000 seeded distractors, abstracts cut to their first 48 words (encoding the full corpus took ~25 min on
the shared 2 cores), embedded with the packaged all-MiniLM-L6-v2.

Part 1, synthetic: N vectors (default 100k) from the Gaussian mixture fitted to those embeddings
(bench/index/index_bench.py's sampler), queries fresh draws: half tune each ANN index to the recall
target (FAISS through training.export.index_factory, Milvus through training.export.milvus_build), the other half
measure recall@10 against exact search. Per backend and index type it prints build time (for Milvus:
insert + index + load + tuning), recall@10, QPS with 1 and 8 client threads issuing one query per call,
and resident memory: FAISS = this process's anonymous memory growth while building; Milvus = the server
process's resident memory growth (the client holds no vectors).

Part 2, scifact: the slice above and its test queries; how many queries get
exactly FAISS exact search's top-10 ids from Milvus FLAT and from Milvus HNSW tuned to the target. These
are the vectors POST /search sends to the index (encoder.to_index_space of the query); /search adds only
the document lookup.

    flock BENCH_LOCK .venv/bin/python -m bench milvus_bench [--n 100000] [--skip-scifact]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bench.harness.memory import status_bytes
from bench.harness.milvus import milvus_server
from bench.harness.paths import REPO, require_scifact
from bench.index.index_bench import mixture_sampler
from contract.index.backend import MILVUS_EXTRAS, BackendConfig
from contract.milvus.index import connect
from training.data.retrieval_data import Document, RetrievalData
from training.export.index_factory import build_index, recall_at
from training.export.milvus_build import milvus_builder
from training.export.shards import exact_top_k

K = 10
RESULTS = REPO / "bench" / "results"
MAX_WORDS, DISTRACTORS = 48, 2000


def slice_data(folder: Path | None = None) -> RetrievalData:
    """The scifact test queries, their relevant documents and DISTRACTORS seeded others (no encoding)."""
    from training.data.beir import load_beir
    from training.data.query_sample import subset

    test = load_beir(folder or require_scifact(), "test")
    return subset(test, n_queries=10_000, n_distractors=DISTRACTORS, seed=0)


def slice_texts(data: RetrievalData) -> list[str]:
    """The slice's document texts as encoded: the title and the abstract's first MAX_WORDS words."""
    from contract.encoding.encoder import document_text

    return [document_text(d.title, " ".join(d.text.split()[:MAX_WORDS])) for d in data.corpus.values()]


def scifact_slice(folder: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(documents (n, 384), test queries (m, 384)) of the cut scifact slice, encoded once and cached."""
    cache = RESULTS / "milvus_bench_scifact_slice.npz"
    if cache.exists():
        z = np.load(cache)
        return z["docs"], z["queries"]
    from contract.encoding.encoder import Encoder

    data = slice_data(folder)
    enc = Encoder.load()
    docs = enc.encode(slice_texts(data), kind="document", show_progress=True)
    queries = enc.encode(list(data.queries.values()), kind="query", show_progress=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    np.savez(cache, docs=docs, queries=queries)
    return docs, queries


def server_pid(port: str) -> str:
    """The milvus-lite server process listening on `port` (its command line names the port)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"milvus_lite" in cmd and port.encode() in cmd:
                return proc.name
    raise RuntimeError("milvus-lite server process not found")


def qps(search_one, queries: np.ndarray, clients: int, seconds: float = 3.0, batch: int = 1) -> float:
    done = [0] * clients
    stop = threading.Event()

    def client(c: int) -> None:
        i = c
        while not stop.is_set():
            start = (i * batch) % max(1, len(queries) - batch)
            search_one(queries[start : start + batch])
            done[c] += batch
            i += clients

    with ThreadPoolExecutor(clients) as pool:
        t0 = time.perf_counter()
        futures = [pool.submit(client, c) for c in range(clients)]
        time.sleep(seconds)
        stop.set()
        for f in futures:
            f.result()
        elapsed = time.perf_counter() - t0
    return sum(done) / elapsed


def faiss_row(kind: str, x: np.ndarray, tune: np.ndarray, measure: np.ndarray, truth, target: float) -> dict:
    base = status_bytes("self", "RssAnon")
    t0 = time.perf_counter()
    index = build_index(x, metric="ip", kind=kind, tune_queries=tune, target_recall=target)
    build = time.perf_counter() - t0
    grown = status_bytes("self", "RssAnon") - base
    found = [p for p, _ in index.search(measure, K)]
    return {
        "backend": "faiss",
        "index": index.info.factory,
        "params": index.info.params,
        "build_s": build,
        "recall@10": recall_at(truth, found),
        "qps1": qps(lambda q: index.search(q, K), measure, 1),
        "qps8": qps(lambda q: index.search(q, K), measure, 8),
        "qps_b64": qps(lambda q: index.search(q, K), measure, 1, batch=64),
        "rss_mb": grown / 2**20,
    }


def milvus_row(config, pid, kind, x, tune, measure, truth, target, name) -> dict:
    corpus = {f"d{i}": Document(f"d{i}", "", "", {}) for i in range(len(x))}
    base = status_bytes(pid, "VmRSS")
    t0 = time.perf_counter()
    info, extras = milvus_builder(config, corpus, metric="ip", index_kind=kind, target_recall=target)(
        name, x, tune
    )
    build = time.perf_counter() - t0
    grown = status_bytes(pid, "VmRSS") - base
    client = connect(config)
    collection = extras[MILVUS_EXTRAS]["collection"]
    params = {"metric_type": "IP", "params": info.params}

    def search(q: np.ndarray):
        return client.search(
            collection, data=q.tolist(), limit=K, output_fields=["pos"], search_params=params
        )

    found = [np.array([h["entity"]["pos"] for h in hits]) for hits in search(measure)]
    row = {
        "backend": "milvus-lite",
        "index": info.factory,
        "params": info.params,
        "build_s": build,
        "recall@10": recall_at(truth, found),
        "qps1": qps(search, measure, 1),
        "qps8": qps(search, measure, 8),
        "qps_b64": qps(search, measure, 1, batch=64),
        "rss_mb": grown / 2**20,
    }
    client.drop_collection(collection)
    return row


def table(rows: list[dict]) -> str:
    out = [
        "| backend | index | params | build s | recall@10 | QPS 1 client | QPS 8 clients | QPS 64/call | resident MB |"
    ]
    out.append("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        out.append(
            f"| {r['backend']} | {r['index']} | {r['params']} | {r['build_s']:.1f} | {r['recall@10']:.3f} | "
            f"{r['qps1']:.1f} | {r['qps8']:.1f} | {r['qps_b64']:.0f} | {r['rss_mb']:.0f} |"
        )
    return "\n".join(out)


def scifact_agreement(config, target: float) -> str:
    docs, q = scifact_slice()  # InfoNCE (cosine): index space = the unit embeddings
    x = docs
    exact = exact_top_k(x, q, K, "ip")
    ids = [f"d{i}" for i in range(len(x))]
    lines = [
        f"scifact slice: {len(ids)} documents (cut to {MAX_WORDS} words), {len(q)} test queries; "
        "Milvus top-10 vs FAISS exact search"
    ]
    for kind in ("flat", "hnsw"):
        corpus = {i: Document(i, "", "", {}) for i in ids}
        info, extras = milvus_builder(config, corpus, metric="ip", index_kind=kind, target_recall=target)(
            f"20260101T000000.000000Z-5c{kind[:4]:0>4}", x, q
        )
        client = connect(config)
        collection = extras[MILVUS_EXTRAS]["collection"]
        hits = client.search(
            collection,
            data=q.tolist(),
            limit=K,
            output_fields=["pos"],
            search_params={"metric_type": "IP", "params": info.params},
        )
        got = [np.array([h["entity"]["pos"] for h in row]) for row in hits]
        same_order = np.mean([np.array_equal(g, e) for g, e in zip(got, exact, strict=True)])
        same_set = np.mean([set(g) == set(e) for g, e in zip(got, exact, strict=True)])
        lines.append(
            f"  milvus {info.factory} {info.params}: identical ranking {same_order:.1%}, same top-10 set "
            f"{same_set:.1%}, recall@10 {recall_at(list(exact), got):.4f} (tuned recall {info.recall_at_10})"
        )
        client.drop_collection(collection)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--clusters", type=int, default=256)
    ap.add_argument("--skip-scifact", action="store_true")
    args = ap.parse_args(argv)
    docs, queries = scifact_slice()
    sample = mixture_sampler(np.concatenate([docs, queries]), args.clusters, seed=0)
    rng = np.random.default_rng(1)
    x, q = sample(args.n, rng), sample(args.queries, rng)
    tune, measure = q[: len(q) // 2], q[len(q) // 2 :]
    truth = list(exact_top_k(x, measure, K, "ip"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="milvus-bench-") as work, milvus_server(Path(work)) as uri:
        config = BackendConfig(backend="milvus", milvus_uri=uri, milvus_name="bench")
        pid = server_pid(uri.rsplit(":", 1)[1])
        for kind in ("flat", "hnsw"):
            rows.append(faiss_row(kind, x, tune, measure, truth, args.target))
            rows.append(
                milvus_row(
                    config,
                    pid,
                    kind,
                    x,
                    tune,
                    measure,
                    truth,
                    args.target,
                    f"20260101T000000.000000Z-be{kind[:4]:0>4}",
                )
            )
            print(table(rows[-2:]), flush=True)
        print(
            f"\n{args.n} mixture vectors (d = {x.shape[1]}), {len(measure)} measuring queries, target {args.target}"
        )
        print(table(rows))
        if not args.skip_scifact:
            print()
            print(scifact_agreement(config, args.target))


if __name__ == "__main__":
    main()
