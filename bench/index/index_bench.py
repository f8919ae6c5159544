"""Index benchmark: build time, bytes/vector, recall@10 and single/batched QPS per index type.

Two datasets:

- real: the scifact corpus (../shared/data/scifact) embedded with the packaged all-MiniLM-L6-v2; the
  embeddings are cached in bench/results/ (git-ignored) so reruns skip the encoding. Queries are the
  scifact queries: half tune the index (build_index's target recall), the other half measure it.
- synthetic: N vectors drawn from a Gaussian mixture fitted to the real embeddings (k-means centres,
  per-cluster diagonal spread), renormalised; queries are fresh draws from the same mixture. Isotropic
  random vectors are unrealistically hard for ANN (no cluster structure to exploit); this keeps the real
  geometry.

recall@10 is |index top-10 ∩ exact top-10| / 10 on the measuring queries. QPS: "b1" = one query per
search() call (the /search path), "b64" = 64 queries per call. Bytes/vector: the serialised index /
N; for ivfpq also the resident part (PQ codes + ids) when the re-ranking vectors are memory-mapped.

Run it under the team's heavy-job flock (it needs minutes of both cores), smaller N first:
    flock <heavy-job lock> .venv/bin/python -m bench index_bench --n 200000
    flock <heavy-job lock> .venv/bin/python -m bench index_bench --skip-real --n 1000000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import faiss
import numpy as np

import training.export.index_factory as build_mod
from bench.harness.paths import REPO, SCIFACT, require_scifact
from contract.index.vector_index import VectorIndex, set_flat_batch_threshold
from training.export.index_factory import build_index

RESULTS = REPO / "bench" / "results"
KINDS = ("flat", "hnsw", "ivf", "ivfpq", "opq")


def real_embeddings() -> tuple[np.ndarray, np.ndarray]:
    """(docs (5183, 384), queries (1109, 384)) from the cache, encoding scifact once if needed."""
    cache = RESULTS / "scifact_minilm_embeddings.npz"
    if cache.exists():
        z = np.load(cache)
        return z["docs"], z["queries"]
    from contract.encoding.encoder import Encoder, document_text
    from training.data.beir import load_corpus

    corpus = load_corpus(require_scifact() / "corpus.jsonl")
    queries = [json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").open() if line.strip()]
    enc = Encoder.load()
    docs = enc.encode([document_text(d.title, d.text) for d in corpus.values()], show_progress=True)
    q = enc.encode(queries, kind="query", show_progress=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    np.savez(cache, docs=docs, queries=q)
    return docs, q


def mixture_sampler(real: np.ndarray, n_clusters: int, seed: int):
    """Fit a Gaussian mixture with tied full covariance to `real`; return sample(n, rng) -> unit vectors.

    Tied *full* covariance (not diagonal) keeps the low intrinsic dimension of text embeddings: a
    diagonal spread fills all 384 directions and makes neighbours nearly equidistant.
    """
    d = real.shape[1]
    km = faiss.Kmeans(d, n_clusters, niter=20, seed=seed)
    km.train(real)
    _, assign = km.index.search(real, 1)
    assign = assign[:, 0]
    weights = np.bincount(assign, minlength=n_clusters).astype(np.float64)
    weights /= weights.sum()
    resid = (real - km.centroids[assign]).astype(np.float64)  # (n, d)
    evals, evecs = np.linalg.eigh(resid.T @ resid / len(resid))
    chol = (evecs * np.sqrt(np.clip(evals, 0, None))).astype(np.float32)  # (d, d): cov = chol chol^T

    def sample(n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((n, d), dtype=np.float32)
        for start in range(0, n, 100_000):
            m = min(100_000, n - start)
            c = rng.choice(n_clusters, m, p=weights)
            x = km.centroids[c] + rng.standard_normal((m, d), dtype=np.float32) @ chol.T  # (m, d)
            out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out

    return sample


def qps(fn, n_calls: int, per_call: int, min_seconds: float = 1.0) -> float:
    """Queries per second of `fn(i)`, repeated until at least min_seconds have passed."""
    done, t0 = 0, time.perf_counter()
    while True:
        for i in range(n_calls):
            fn(i)
            done += per_call
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return done / elapsed


def bench_kind(
    name: str,
    kind: str,
    x: np.ndarray,
    tune_q: np.ndarray,
    eval_q: np.ndarray,
    truth: np.ndarray,
    target: float,
) -> dict:
    build_mod.USE_OPQ = kind == "opq"  # "opq": ivfpq with an OPQ rotation in front
    t0 = time.perf_counter()
    vi = build_index(
        x,
        metric="ip",
        kind="ivfpq" if kind == "opq" else kind,
        tune_queries=tune_q,
        target_recall=target,
        seed=0,
    )
    build = time.perf_counter() - t0
    if vi.info.resident_bytes_per_vector is not None:
        # serve it as a bundle would: re-ranking vectors memory-mapped from the file, codes in RAM
        path = vi.save(RESULTS / "bench_ivfpq.faiss")
        vi = VectorIndex.load(path, vi.info, mmap=True)
    found = vi.search(eval_q, 10)
    recall = float(np.mean([len(np.intersect1d(p, t)) / 10 for (p, _), t in zip(found, truth, strict=True)]))
    n_single = min(len(eval_q), 30 if kind == "flat" and len(x) > 300_000 else 300)
    b1 = qps(lambda i: vi.search(eval_q[i : i + 1], 10), n_single, 1)
    batches = [eval_q[i : i + 64] for i in range(0, len(eval_q) - 63, 64)][:8]
    b64 = qps(lambda i: vi.search(batches[i], 10), len(batches), 64)
    row = {
        "data": name,
        "n": len(x),
        "kind": kind,
        "factory": vi.info.factory,
        "params": vi.info.params,
        "build_s": round(build, 1),
        "bytes_per_vector": vi.info.bytes_per_vector,
        "resident_bytes_per_vector": vi.info.resident_bytes_per_vector or vi.info.bytes_per_vector,
        "tune_recall@10": vi.info.recall_at_10,
        "recall@10": round(recall, 4),
        "qps_b1": round(b1, 1),
        "qps_b64": round(b64, 1),
    }
    print(json.dumps(row), flush=True)
    return row


def run(name: str, x: np.ndarray, queries: np.ndarray, kinds: tuple[str, ...], target: float) -> list[dict]:
    rng = np.random.default_rng(0)
    order = rng.permutation(len(queries))
    half = len(order) // 2
    tune_q, eval_q = queries[order[:half]], queries[order[half:]]
    exact = faiss.IndexFlatIP(x.shape[1])
    exact.add(x)
    _, truth = exact.search(eval_q, 10)
    del exact
    return [bench_kind(name, k, x, tune_q, eval_q, truth, target) for k in kinds]


def table(rows: list[dict]) -> str:
    flat = {r["data"]: r for r in rows if r["kind"] == "flat"}
    head = (
        "| data | N | index | params | build s | B/vec (resident) | R@10 | b1 QPS | b64 QPS | "
        "b1 vs flat | memory vs flat |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        f = flat.get(r["data"])
        speed = f"{r['qps_b1'] / f['qps_b1']:.0f}x" if f else "-"
        mem = f"{r['resident_bytes_per_vector'] / f['bytes_per_vector']:.3f}" if f else "-"
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "exact"
        lines.append(
            f"| {r['data']} | {r['n']:,} | {r['factory']} | {params} | {r['build_s']} | "
            f"{r['bytes_per_vector']:.0f} ({r['resident_bytes_per_vector']:.0f}) | {r['recall@10']:.3f} | "
            f"{r['qps_b1']:,.0f} | {r['qps_b64']:,.0f} | {speed} | {mem} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="synthetic set size (1000000 for the 1M table)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--clusters", type=int, default=256, help="mixture components fitted to the real set")
    ap.add_argument("--out", type=Path, default=RESULTS / "index_bench.json")
    args = ap.parse_args(argv)
    kinds = tuple(args.kinds.split(","))
    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads", flush=True)
    docs, queries = real_embeddings()
    set_flat_batch_threshold(docs.shape[1])
    rows: list[dict] = []
    if not args.skip_real:
        rows += run("scifact", docs, queries, kinds, args.target_recall)
    if not args.skip_synthetic:
        sample = mixture_sampler(np.concatenate([docs, queries]), args.clusters, seed=0)
        rng = np.random.default_rng(1)
        t0 = time.perf_counter()
        x = sample(args.n, rng)
        q = sample(2_000, rng)
        print(f"drew {args.n:,} synthetic vectors in {time.perf_counter() - t0:.1f}s", flush=True)
        rows += run("synthetic", x, q, kinds, args.target_recall)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
