"""The API with a meter on its query encoder, for `python -m bench request_profile` only:
`uvicorn --factory bench.harness.encode_meter:create_app`.

Every call of `LiveBundle._encode` (the one place a served query is encoded, whatever the backend:
app/engine/live_bundle.py) adds the CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID, in ns)
to a counter that `GET /bench/encoder-cpu` returns. With one intra-op thread (SEARCH_ENCODER_THREADS=1)
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

from app.engine import live_bundle
from app.main import create_app as _create_app

_lock = threading.Lock()
_totals = {"cpu_ns": 0, "calls": 0, "texts": 0}


def _metered(encode: Any) -> Any:
    def wrapper(self: Any, texts: list[str], token_ids: Any) -> Any:
        started = time.thread_time_ns()
        try:
            return encode(self, texts, token_ids)
        finally:
            used = time.thread_time_ns() - started
            with _lock:
                _totals["cpu_ns"] += used
                _totals["calls"] += 1
                _totals["texts"] += len(texts)

    wrapper.metered = True  # type: ignore[attr-defined]
    return wrapper


def create_app() -> FastAPI:
    if not getattr(live_bundle.LiveBundle._encode, "metered", False):
        live_bundle.LiveBundle._encode = _metered(live_bundle.LiveBundle._encode)  # type: ignore[method-assign]
    app = _create_app()

    @app.get("/bench/encoder-cpu", include_in_schema=False)
    def encoder_cpu() -> dict[str, int]:
        with _lock:
            return dict(_totals)

    return app
