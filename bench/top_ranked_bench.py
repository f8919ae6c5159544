"""Ranking the top of a large corpus for mining: partial selection vs a full stable argsort.

    nice -n 10 .venv/bin/python bench/top_ranked_bench.py [--docs 1000000] [--rows 64] [--k 50]

mine_hard_negatives (training/train/negatives.py) ranks each query's best `rank_max` documents; this times
`top_ranked` (argpartition, then a sort of the k picked) against the full stable argsort it replaced, on
random float32 scores of one chunk of queries, checks they agree, and prints both and their ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from training.train.negatives import top_ranked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--k", type=int, default=50)
    args = parser.parse_args()
    scores = np.random.default_rng(0).normal(size=(args.rows, args.docs)).astype(np.float32)  # (rows, docs)
    started = time.perf_counter()
    fast = top_ranked(scores, args.k)
    fast_s = time.perf_counter() - started
    started = time.perf_counter()
    full = np.argsort(-scores, axis=1, kind="stable")[:, : args.k]
    full_s = time.perf_counter() - started
    print(f"{args.rows} rows x {args.docs:,} documents, k {args.k}: top_ranked {fast_s:.2f} s, "
          f"full argsort {full_s:.2f} s ({full_s / fast_s:.1f}x), same ranking: {bool((fast == full).all())}")  # fmt: skip


if __name__ == "__main__":
    main()
