"""One query's exact flat search right after the cache has been swept: fp32 scan against HalfScan's fp16 scan.

    .venv/bin/python -m bench half_scan [--n 1100,2500,5000,15000,50000,200000] [--flush-mb 64]
    .venv/bin/python -m bench half_scan --bundles var/bench/corpora/scifact/bundles [--bundles ...]

A served query's scan follows its encode, and the int8 encoder's layer weights (about 12 MB for MiniLM)
evict the index's vectors from the CPU cache. For each size --n (clustered unit vectors, d = 384, IndexFlatIP) it
sweeps --flush-mb of memory before each search, alternating the fp32 search and HalfScan's (fp16 scan,
exact re-scoring, fp32 fallback; contract/index/half_scan.py), and prints CPU µs per query at k = 10 and
100 (hybrid's depth), best of --rounds, with the certificate's fallbacks. With --bundles the flush is the
real one: the live bundle's int8 query encoder encodes each of its recorded timing queries before the
search. Both run on one OpenMP thread, as served single queries do (vector_index.faiss_search).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from contract.index.half_scan import HalfScan, flat_vectors
from contract.index.vector_index import faiss_search


def clustered(n: int, d: int, seed: int) -> np.ndarray:
    """A Gaussian mixture on the sphere, like text embeddings (bench/index/index_bench.py)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(8, n // 200), d))
    x = centres[rng.integers(0, len(centres), n)] + 0.6 * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def timed(
    flat: faiss.Index, half: HalfScan, queries: np.ndarray, k: int, flush: Callable[[int], Any], rounds: int
) -> tuple[float, float]:
    """Best-of-rounds CPU µs per query of the fp32 and the fp16 search, each after a flush, alternated."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        spent = [0.0, 0.0]
        for i in range(len(queries)):
            q = queries[i : i + 1]
            for j in range(2):
                flush(i)
                started = time.process_time()
                if j == 0:
                    faiss_search(flat, q, k)
                else:
                    half.search(q, k, faiss_search)
                spent[j] += time.process_time() - started
        best = [min(b, s / len(queries) * 1e6) for b, s in zip(best, spent, strict=True)]
    return best[0], best[1]


def report(
    name: str, flat: faiss.Index, queries: np.ndarray, flush: Callable[[int], Any], rounds: int
) -> None:
    n, d = flat.ntotal, flat.d
    half = HalfScan(flat, flat_vectors(flat))  # at every size: HalfScan.build would skip the small ones
    for k in (10, 100):
        before = half.fallbacks
        fp32, fp16 = timed(flat, half, queries, k, flush, rounds)
        fallbacks = (half.fallbacks - before) // rounds
        print(
            f"{name:>28s} {n:>8d} {n * d * 4 / 2**20:7.1f} {k:>4d} {fp32:8.0f} {fp16:8.0f} "
            f"{fp16 / fp32:7.2f} {fallbacks:>4d}/{len(queries)}"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1100,2500,5000,15000,50000,200000", help="synthetic corpus sizes")
    ap.add_argument("--bundles", action="append", type=Path, default=[], help="a bundle store (repeatable)")
    ap.add_argument("--flush-mb", type=int, default=64, help="memory swept before each synthetic search")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    faiss.omp_set_num_threads(1)
    print(
        f"faiss {faiss.__version__}, one OpenMP thread; CPU µs per query after a cache flush, best of {args.rounds}"
    )
    print(
        f"{'corpus':>28s} {'n':>8s} {'fp32 MB':>7s} {'k':>4s} {'fp32':>8s} {'fp16':>8s} {'ratio':>7s} fallbacks"
    )
    if args.bundles:
        for folder in args.bundles:
            bundle_row(folder, args.rounds)
        return
    sweep = np.ones(args.flush_mb << 18, np.float32)  # --flush-mb MiB
    for n in (int(x) for x in args.n.split(",")):
        x = clustered(n + args.queries, 384, n)
        flat = faiss.IndexFlatIP(384)
        flat.add(x[:n])
        report(f"clustered, {args.flush_mb} MB swept", flat, x[n:], lambda _: float(sweep.sum()), args.rounds)


def bundle_row(folder: Path, rounds: int) -> None:
    from app.engine.live_bundle import EncoderOptions, open_live_bundle
    from bench.harness.profiling import live_timing_queries
    from contract.bundles.bundle import load_bundle
    from training.bundle.store import BundleStore

    store = BundleStore(folder)
    bundle = load_bundle(store.version_path(str(store.current_version())), mmap=True)
    live = open_live_bundle(bundle, "onnx-int8", EncoderOptions(threads=1, spare_cores=False))
    texts = live_timing_queries(folder)
    queries = live.encode(texts)
    report(
        f"{folder.parent.name}, int8 encode",
        bundle.index.index,
        queries,
        lambda i: live.encode([texts[i]]),
        rounds,
    )
    live.bundle.docstore.close()


if __name__ == "__main__":
    main()
