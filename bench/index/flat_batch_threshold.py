"""Exact (flat) search cost per query by batch size: FAISS's per-query SIMD scan against its one sgemm.

    .venv/bin/python -m bench flat_batch_threshold [--n 1100,15000,100000] [--batches 1,2,4,6,8,12,16,20,32]

FAISS answers an exact search with a per-query SIMD scan below `distance_compute_blas_threshold` (in
nq·d) and with one sgemm over the batch above it; contract/index/vector_index.py sets that threshold
(`set_flat_batch_threshold`), and the micro-batcher's batches at 32 clients hold ~16 queries
(bench/serving/request_profile.py prints the size). For each corpus size --n (unit vectors, d = 384,
an IndexFlatIP: the scan's cost does not depend on where the vectors point) and each batch size, it
times both paths on one OpenMP thread (the serving path below 20 queries, `faiss_search`) with k = 100
(hybrid search's depth) and prints CPU µs per query and the smallest batch from which sgemm wins at
every size.
"""

from __future__ import annotations

import argparse
import time

import faiss
import numpy as np

NEVER = 2**31 - 1  # a threshold (a C int) no batch reaches: always the SIMD scan


def per_query_us(index: faiss.Index, queries: np.ndarray, k: int, threshold: int, seconds: float) -> float:
    """CPU µs per query of `index.search(queries, k)` with FAISS's sgemm threshold at `threshold`."""
    faiss.cvar.distance_compute_blas_threshold = threshold
    for _ in range(3):
        index.search(queries, k)
    reps, started = 0, time.process_time()
    while reps < 5 or time.process_time() - started < seconds:
        index.search(queries, k)
        reps += 1
    return (time.process_time() - started) / reps / len(queries) * 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1100,15000,100000", help="corpus sizes")
    ap.add_argument("--batches", default="1,2,4,6,8,12,16,20,32", help="queries per search call")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=0.5, help="CPU time spent on each cell")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    saved = faiss.cvar.distance_compute_blas_threshold
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((max(batches), args.dim)).astype(np.float32)
    faiss.normalize_L2(queries)
    print(f"faiss {faiss.__version__}, one OpenMP thread, d = {args.dim}, k = {args.k}; CPU µs per query")
    print(f"{'n':>8s} {'batch':>5s} {'scan':>9s} {'sgemm':>9s} {'sgemm/scan':>10s}")
    wins_from: list[int] = []
    try:
        for n in (int(x) for x in args.n.split(",")):
            docs = rng.standard_normal((n, args.dim)).astype(np.float32)
            faiss.normalize_L2(docs)
            index = faiss.IndexFlatIP(args.dim)
            index.add(docs)
            first = None
            for b in batches:
                scan = per_query_us(index, queries[:b], args.k, NEVER, args.seconds)
                gemm = per_query_us(index, queries[:b], args.k, 0, args.seconds)
                print(f"{n:8d} {b:5d} {scan:9.1f} {gemm:9.1f} {gemm / scan:10.2f}", flush=True)
                if gemm < scan and first is None:
                    first = b
                elif gemm >= scan:
                    first = None  # sgemm must keep winning from there on
            wins_from.append(first if first is not None else NEVER)
    finally:
        faiss.cvar.distance_compute_blas_threshold = saved
    worst = max(wins_from)
    print(
        "sgemm wins at every size from a batch of "
        + (f"{worst} queries" if worst != NEVER else "none of the sizes tried")
    )


if __name__ == "__main__":
    main()
