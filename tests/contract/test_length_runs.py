"""Length runs (contract/encoding/length_runs.py): the cheapest cut of length-sorted rows, against every cut."""

from __future__ import annotations

import itertools
import random

import pytest

from contract.encoding.length_runs import length_runs


def cost(lengths: list[int], runs: list[tuple[int, int]], overhead: int) -> int:
    return sum(overhead + (end - start) * lengths[start] for start, end in runs)


def every_cut(n: int):
    """Every way to cut n rows into consecutive runs, as [start, end) pairs."""
    for bars in itertools.product([False, True], repeat=n - 1):
        edges = [0] + [i + 1 for i, bar in enumerate(bars) if bar] + [n]
        yield list(itertools.pairwise(edges))


@pytest.mark.parametrize("seed", range(40))
def test_the_cut_is_the_cheapest_of_every_allowed_cut(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 10)
    lengths = sorted((rng.choice([rng.randint(3, 20), rng.randint(20, 180)]) for _ in range(n)), reverse=True)
    overhead, max_rows, max_tokens = (
        rng.choice([0, 5, 8, 50]),
        rng.randint(1, 6),
        rng.choice([64, 256, 10**6]),
    )

    def allowed(runs):
        return all(
            end - start <= max_rows and ((end - start) * lengths[start] <= max_tokens or end - start == 1)
            for start, end in runs
        )

    got = length_runs(lengths, max_rows=max_rows, max_tokens=max_tokens, overhead=overhead)
    assert got[0][0] == 0 and got[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(got)), "runs must be consecutive"
    assert allowed(got)
    best = min(cost(lengths, runs, overhead) for runs in every_cut(n) if allowed(runs))
    assert cost(lengths, got, overhead) == best


def test_one_long_row_runs_apart_from_the_short_ones():
    # padding 9 short rows to 172 tokens costs far more than one more run
    assert length_runs([172] + [14] * 9, max_rows=32, max_tokens=10**6, overhead=8) == [(0, 1), (1, 10)]
    # an overhead no padding can beat: one run, as before runs were cut by length
    assert length_runs([172] + [14] * 9, max_rows=32, max_tokens=10**6, overhead=10**9) == [(0, 10)]


def test_unsorted_lengths_and_empty_input():
    assert length_runs([], max_rows=4, max_tokens=100) == []
    with pytest.raises(ValueError, match="sorted longest first"):
        length_runs([3, 9], max_rows=4, max_tokens=100)
