"""What the bundle scrub costs: sha256 of a bundle file (contract.bundles.parts.sha256_file), in MB/s.

    flock BENCH_LOCK .venv/bin/python -m bench scrub_bench [mb=300] [runs=3]

Writes a file of `mb` MB of random float32 rows (what index.faiss of a flat index mostly is), hashes it
`runs` times (the first run may read from disk, later ones from the page cache), prints each run's MB/s
and projects the scrub of a flat 1M x 384 float32 index (1.5 GB) at the slowest rate. The scrub runs
every SEARCH_SCRUB_INTERVAL_S in a worker thread (app/live/hot_swap.py), so this is CPU time of one core
taken from serving once per interval.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness.usage import asked_for_help
from contract.bundles.parts import sha256_file

FLAT_1M_BYTES = 1_000_000 * 384 * 4  # a flat 1M x 384 float32 index: 1.536 GB


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    args = dict(a.split("=", 1) for a in argv)
    mb, runs = int(args.get("mb", 300)), int(args.get("runs", 3))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.bin"
        rng = np.random.default_rng(0)
        with open(path, "wb") as f:
            for _ in range(mb):
                f.write(rng.standard_normal(1 << 18, dtype=np.float32).tobytes())  # 1 MB
        rates = []
        for run in range(runs):
            start = time.perf_counter()
            sha256_file(path)
            seconds = time.perf_counter() - start
            rates.append(mb * (1 << 20) / 1e6 / seconds)
            print(f"run {run}: {mb} MiB in {seconds:.2f} s = {rates[-1]:.0f} MB/s")
    slowest = min(rates)
    print(
        f"flat 1M x 384 float32 index ({FLAT_1M_BYTES / 1e9:.2f} GB): {FLAT_1M_BYTES / 1e6 / slowest:.1f} s per scrub"
    )
