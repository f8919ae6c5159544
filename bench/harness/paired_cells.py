"""Two load cells alternated in pairs (A then B, B then A, ...), for ratios this machine's drift cannot fake.

Its speed drifts by up to 1.5x from one minute to the next: in one corpus run, the same server layout
started twice served 454 and 348 req/s at 32 clients (pycode; bench/results/
load_bench_corpora_debpkgs-pycode_onnx-int8.txt, its 'default mode' and '1 process' rows, both 1 x 2).
A ratio of two cells measured minutes apart carries that drift whole; the median over pairs taken
back to back, each pair in the other order than the last, does not.

Each cell starts DRAIN_S after the last one ended: wrk stops at its duration, not when the server has
answered, and a slow server still works through the requests in flight (the naive app at 32 clients: p99
0.8-0.9 s). Without the pause the cell after a naive one shared the cores with that tail: in the first
run of the naive pairs the service's p99 was 104-137 ms right after a naive cell, 45-46 ms right before one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.wrk import drive_wrk

DRAIN_S = 2.0  # seconds between cells (module docstring)


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
        first, second = [_cell(c, clients, seconds) for c in ((b, a) if swapped else (a, b))]
        runs.append((second, first) if swapped else (first, second))
    return runs


def _cell(cell: Cell, clients: int, seconds: float) -> dict[str, Any]:
    time.sleep(DRAIN_S)
    return drive_wrk(cell.url, cell.bodies, clients, seconds, 0)


def median_ratio(runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[float, list[float]]:
    """The median of a's req/s over b's across the pairs, and every pair's ratio, smallest first."""
    ratios = sorted(x["qps"] / y["qps"] for x, y in runs)
    return float(np.median(ratios)), ratios
