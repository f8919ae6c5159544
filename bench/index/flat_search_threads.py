"""What FAISS's second OpenMP thread buys an exact search, and what it costs the rest of the process.

    .venv/bin/python -m bench flat_search_threads [--n 1100,15000,100000] [--batches 8,16,32] [--gap-ms 40]

FAISS parallelises a search over its OpenMP team (and its bundled OpenBLAS runs the batch's sgemm on
that team). When the search returns, libgomp's idle worker does not sleep: it spins, waiting for the
next parallel region, for GOMP_SPINCOUNT iterations (300,000 by default), milliseconds of a core that
the event loop or the other worker's encoder wanted. A served micro-batch is followed by a gap (the next
batch's encode), so each search pays that spin in full.

For each corpus size --n (an IndexFlatIP of unit vectors, d = 384, k = 100, the sgemm threshold as
serving sets it: contract.index.vector_index.set_flat_batch_threshold) and batch size, it runs searches
separated by --gap-ms of sleep, on one OpenMP thread and then on two, and prints per search: the wall
time of the call, and the process's CPU over the call and the gap that follows (the spin included).
"""

from __future__ import annotations

import argparse
import time

import faiss
import numpy as np

from contract.index.vector_index import set_flat_batch_threshold


def per_search(
    index: faiss.Index, queries: np.ndarray, k: int, gap_s: float, reps: int
) -> tuple[float, float]:
    """(wall ms of the call, process CPU ms of the call and the gap after it), medians over `reps`."""
    walls, cpus = [], []
    index.search(queries, k)  # warm-up
    time.sleep(gap_s)
    for _ in range(reps):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        index.search(queries, k)
        wall1 = time.perf_counter()
        time.sleep(gap_s)
        walls.append(wall1 - wall0)
        cpus.append(time.process_time() - cpu0)
    return float(np.median(walls)) * 1e3, float(np.median(cpus)) * 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1100,15000,100000", help="corpus sizes")
    ap.add_argument("--batches", default="8,16,32", help="queries per search call")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--gap-ms", type=float, default=40.0, help="sleep after each search (the next encode)")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    set_flat_batch_threshold(args.dim)
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((max(batches), args.dim)).astype(np.float32)
    faiss.normalize_L2(queries)
    threads = faiss.omp_get_max_threads()
    print(
        f"faiss {faiss.__version__}, d = {args.dim}, k = {args.k}, {args.gap_ms:.0f} ms between searches, "
        f"OpenMP team of {threads}; ms per search (median of {args.reps})"
    )
    print(
        f"{'n':>8s} {'batch':>5s} {'wall 1 thr':>10s} {'wall 2 thr':>10s} {'CPU 1 thr':>10s} {'CPU 2 thr':>10s}"
    )
    for n in (int(x) for x in args.n.split(",")):
        docs = rng.standard_normal((n, args.dim)).astype(np.float32)
        faiss.normalize_L2(docs)
        index = faiss.IndexFlatIP(args.dim)
        index.add(docs)
        for b in batches:
            cells = []
            for team in (1, 2):
                faiss.omp_set_num_threads(team)
                cells.append(per_search(index, queries[:b], args.k, args.gap_ms / 1e3, args.reps))
            faiss.omp_set_num_threads(threads)
            (w1, c1), (w2, c2) = cells
            print(f"{n:8d} {b:5d} {w1:10.2f} {w2:10.2f} {c1:10.2f} {c2:10.2f}", flush=True)


if __name__ == "__main__":
    main()
