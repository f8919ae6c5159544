"""Freed memory handed back to the operating system at the end of each phase of a run.

glibc keeps the memory a process frees in its heap for later reuse rather than returning it, and torch frees
a training step's activations and gradients into that heap. On the demo corpus (default recipe, 5 steps; a
one-off resident-memory sampler beside the pipeline, not kept in bench/) the process held 2.1 GB after
training with 1.2 GB of it live, and `malloc_trim(0)` gave back 0.96 GB. Without it the ONNX export and the
static tower's distillation stacked their own peaks on the retained heap: a default run peaked at 3.2 GB in
the distillation, above the 3 GB a default run may hold; with it, and onnxruntime's bulk encodes capped
(contract/encoding/onnx_encoder.py), at 2.3 GB in the training steps
(bench/results/retrain_memory_demo.txt). The garbage collector runs first, for what a phase left in
reference cycles; both take about 0.3 s, under 15 phase ends a run. malloc_trim trims every thread's arena,
so a worker running retrains as jobs on its threads gives the heap back too (not measured in the worker).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import time
from typing import Any

logger = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Any | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Return the heap's free pages to the operating system; False where this C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    started = time.perf_counter()
    gc.collect()
    trim(0)
    logger.debug("gc + malloc_trim in %.1f ms", (time.perf_counter() - started) * 1000)
    return True
