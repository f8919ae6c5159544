"""Two load cells alternated in pairs (A then B, B then A, ...), for ratios this machine's drift cannot fake.

Its speed drifts by up to 1.5x from one minute to the next: in one corpus run, the same server layout
started twice served 454 and 348 req/s at 32 clients (pycode; bench/results/
load_bench_corpora_debpkgs-pycode_onnx-int8.txt, its 'default mode' and '1 process' rows, both 1 x 2).
A ratio of two cells measured minutes apart carries that drift whole; the median over pairs taken
back to back, each pair in the other order than the last, does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.wrk import drive_wrk


@dataclass(frozen=True)
class Cell:
    url: str  # the server's base URL (search_load.lua posts to its /search)
    bodies: Path  # wrk bodies (bench.harness.wrk.write_wrk_bodies)


def alternated(
    a: Cell, b: Cell, pairs: int, clients: int, seconds: float
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(a's run, b's run) per pair, wrk at `clients` for `seconds` each, the order swapped every pair."""
    runs = []
    for i in range(pairs):
        swapped = i % 2 == 1
        first, second = [
            drive_wrk(c.url, c.bodies, clients, seconds, 0) for c in ((b, a) if swapped else (a, b))
        ]
        runs.append((second, first) if swapped else (first, second))
    return runs


def median_ratio(runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[float, list[float]]:
    """The median of a's req/s over b's across the pairs, and every pair's ratio, smallest first."""
    ratios = sorted(x["qps"] / y["qps"] for x, y in runs)
    return float(np.median(ratios)), ratios
