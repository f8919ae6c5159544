"""One request must not hold the inference thread for long: a token budget and fair slicing.

Encoding cost grows with tokens, not characters or queries (a 2,048-character query is ~400 tokens cut
to the model's 256; a typical one is ~20), so the budget is counted in tokens, with the serving model's
own tokenizer and truncation:

- a request over `Settings.max_request_tokens` is refused up front (422, naming the field);
- a request over `Settings.fair_slice_tokens` tokens or `Settings.fair_slice_queries` queries is run as
  consecutive slices of at most that many (at least one query each), each queued on its own behind
  whatever arrived meanwhile. Both caps matter: 256 short queries are ~15 tokens each, so by tokens alone
  a slice held ~17 of them, and a search's own work (FAISS, fusion, documents, hits) grows with queries,
  not tokens. The micro-batcher runs waiting single-slice requests ahead of the slices of big ones
  (app/engine/batching.py), so a small request waits for at most the slice in flight.
  bench/serving/fairness_bench.py measures single-query latency beside clients sending big batches.

The answer of a sliced request is its slices' hits in order, with their encode and search times summed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import numpy as np

from app.engine.search_spec import Answer, EmbedAnswer, SearchAnswer, SearchSpec, Spec


def slices(spec: Spec, max_tokens: int, max_queries: int | None = None) -> list[Spec]:
    """Consecutive slices of `spec`'s texts (and their token ids) with at most `max_tokens` tokens and
    `max_queries` texts each (one text at least)."""
    most = max_queries or len(spec.tokens or [])
    if spec.texts is None or spec.tokens is None or (sum(spec.tokens) <= max_tokens and spec.n <= most):
        return [spec]
    out: list[Spec] = []
    start, used = 0, 0
    for i, n in enumerate(spec.tokens):
        if i > start and (used + n > max_tokens or i - start >= most):
            out.append(_part(spec, start, i))
            start, used = i, 0
        used += n
    out.append(_part(spec, start, len(spec.tokens)))
    return out


def _part(spec: Spec, start: int, stop: int) -> Spec:
    assert spec.texts is not None and spec.tokens is not None
    ids = spec.token_ids
    part = replace(
        spec,
        texts=spec.texts[start:stop],
        tokens=spec.tokens[start:stop],
        token_ids=None if ids is None else ids[start:stop],  # type: ignore[arg-type]
    )
    if isinstance(part, SearchSpec) and part.cached is not None:
        part.cached = part.cached[start:stop]
    return part


async def run_sliced(
    run_one: Callable[[Spec, bool], Awaitable[Answer]],
    spec: Spec,
    max_tokens: int,
    max_queries: int | None = None,
) -> Answer:
    """Run `spec` slice by slice through `run_one(part, sliced)` (each slice queues anew) and join the
    answers; `sliced` tells the runner the part is one slice of a bigger request."""
    parts = slices(spec, max_tokens, max_queries)
    if len(parts) == 1:
        return await run_one(spec, False)
    answers = [await run_one(part, True) for part in parts]
    if all(isinstance(a, EmbedAnswer) for a in answers):  # an /embed request's slices, in order
        return EmbedAnswer(
            np.concatenate([a.vectors for a in answers]),  # type: ignore[union-attr]
            encode_ms=sum(a.encode_ms for a in answers),
        )
    return SearchAnswer(
        hits=[hits for a in answers for hits in a.hits],  # type: ignore[union-attr]
        encode_ms=sum(a.encode_ms for a in answers),
        search_ms=sum(a.search_ms for a in answers),
    )
