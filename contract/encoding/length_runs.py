"""How texts sorted by token length are cut into encoder runs: the fewest tokens, padding included, plus a
fixed cost per run.

A run pads every row to its longest, so one long query in a batch of short ones multiplies the batch's
tokens. The demo corpus's queries (14 tokens at the median, up to 172) cost onnxruntime (int8, one thread)
3.9-4.4 ms each in padded batches of 16-32 against 2.1-2.3 ms one at a time, while one query repeated (no
padding) cost 1.2 ms a query in batches of 32 against 1.6-1.7 ms alone (python -m bench onnx_query_runs;
bench/results/onnx_query_runs.txt). Cutting the sorted rows where the padding would cost more than another
run keeps batching's gain without paying for the padding: 1.87 ms a query in batches of 32.

The cost of a run is modelled as `RUN_OVERHEAD_TOKENS + rows × width` tokens (width: its longest row).
The overhead is a run's fixed cost (session call, per-op dispatch) in tokens' worth of work, fitted on
the bench's same-length rows: 5 tokens for int8, 9 for fp32 (same bench and file). Splits are chosen by
dynamic programming over the sorted lengths, exact under that model, in O(n × max_rows).
"""

from __future__ import annotations

from collections.abc import Sequence

# a run's fixed cost in tokens' worth of encoding; between int8's 5 and fp32's 9 (module docstring)
RUN_OVERHEAD_TOKENS = 8


def length_runs(
    lengths: Sequence[int], *, max_rows: int, max_tokens: int, overhead: int = RUN_OVERHEAD_TOKENS
) -> list[tuple[int, int]]:
    """[start, end) runs over `lengths` (sorted longest first) minimising Σ (overhead + rows × width),
    each of at most `max_rows` rows and `max_tokens` tokens (rows × width; a row longer than that runs
    alone). Consecutive and in order, so the caller's sorted order is kept."""
    n = len(lengths)
    if n == 0:
        return []
    if any(a < b for a, b in zip(lengths, lengths[1:], strict=False)):
        raise ValueError("length_runs needs lengths sorted longest first")
    inf = float("inf")
    best = [0.0] + [inf] * n  # best[j]: cost of the first j rows
    cut = [0] * (n + 1)  # cut[j]: where the last run of the first j rows starts
    for start in range(n):
        if best[start] == inf:
            continue
        width = max(1, lengths[start])  # sorted: the run's first row is its longest
        rows_cap = max(1, min(max_rows, max_tokens // width))
        for end in range(start + 1, min(n, start + rows_cap) + 1):
            cost = best[start] + overhead + (end - start) * width
            if cost < best[end]:
                best[end], cut[end] = cost, start
    runs = []
    end = n
    while end > 0:
        runs.append((cut[end], end))
        end = cut[end]
    return runs[::-1]
