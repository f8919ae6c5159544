"""The API with a meter on its query encoder, for `python -m bench request_profile` only:
`uvicorn --factory bench.harness.encode_meter:create_app`.

Every call of `LiveBundle._encode` (the one place a served query is encoded, whatever the backend:
app/engine/live_bundle.py) adds the CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID, in ns)
to a counter that `GET /bench/encoder-cpu` returns; every call of the query tokenizer
(`QueryTokenizer.__call__`, app/engine/query_tokens.py: a request's texts are tokenised once, before
they queue) adds to a second one, so the two halves of "the encoder" (tokenizer and model) are read
apart. With one intra-op thread (SEARCH_ENCODER_THREADS=1)
onnxruntime and torch run the whole forward pass on that calling thread, so the counter is the
encoder's entire CPU. The server's total CPU minus it, over the same requests, is what the request
costs outside the encoder, measured in one window of one process: no subtraction of a figure taken in
another process at another minute, which this machine's drift (up to 1.5x from minute to minute)
made unreliable.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fastapi import FastAPI

from app.engine import live_bundle, query_tokens
from app.main import create_app as _create_app

_lock = threading.Lock()
_totals = {"cpu_ns": 0, "calls": 0, "texts": 0, "tokenizer_cpu_ns": 0}


def _metered(fn: Any, key: str, count: bool) -> Any:
    """`fn(self, texts, *rest)` adding its thread's CPU to `_totals[key]` (and, with `count`, its calls and
    texts: the encoder's batch size)."""

    def wrapper(self: Any, texts: Any, *rest: Any) -> Any:
        started = time.thread_time_ns()
        try:
            return fn(self, texts, *rest)
        finally:
            used = time.thread_time_ns() - started
            with _lock:
                _totals[key] += used
                if count:
                    _totals["calls"] += 1
                    _totals["texts"] += len(texts)

    wrapper.metered = True  # type: ignore[attr-defined]
    return wrapper


def create_app() -> FastAPI:
    model, tokenizer = live_bundle.LiveBundle, query_tokens.QueryTokenizer
    if not getattr(model._encode, "metered", False):
        model._encode = _metered(model._encode, "cpu_ns", True)  # type: ignore[method-assign]
    if not getattr(tokenizer.__call__, "metered", False):
        tokenizer.__call__ = _metered(tokenizer.__call__, "tokenizer_cpu_ns", False)  # type: ignore[method-assign]
    app = _create_app()

    @app.get("/bench/encoder-cpu", include_in_schema=False)
    def encoder_cpu() -> dict[str, int]:
        with _lock:
            return dict(_totals)

    return app
