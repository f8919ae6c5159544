"""The process's long-lived objects kept out of the garbage collector's full collections.

A served process tracks about 560,000 container objects once its bundle is loaded (torch, transformers,
FastAPI and the bundle itself; the demo bundle), and a full (generation 2) collection walks every one of
them: 260-280 ms holding the GIL, once every ~5 s under load, so each one stalled every request in flight.
One process at 32 clients (demo bundle, int8; a one-off latency recorder beside the server, the collector's
own callbacks timing each pass) had p99 352 ms against p50 73 ms, and the slow requests all fell inside
the collections' pauses. `gc.freeze()` moves every object tracked so far into a permanent generation that
no collection walks; a full collection then sees only what came after. `python -m bench thread_cpu`,
never frozen against frozen, alternated (bench/results/thread_cpu_gc_freeze_demo.txt): p99 at 8 clients
192-199 ms -> 21-22 ms, at 32 clients 84-335 ms -> 89-95 ms, throughput unchanged.

What is frozen is never freed as a reference cycle, so the freeze must not catch a bundle on its way out.
When a bundle goes live or is dropped (a swap, a fallback, a collection loaded or evicted) the process
unfreezes at once, so the old bundle is collectable as it always was, and freezes again `settle_s` later,
after one full collection, when requests still holding the old bundle have finished with it. At start-up,
with nothing on its way out, it freezes as soon as the default collection is loaded. A request that holds
an old bundle for longer than `settle_s` keeps that bundle's cycles (if it has any) until the next change.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time

logger = logging.getLogger(__name__)


class HeapFreezer:
    """Freezes the heap now, or `settle_s` after the last change; `settle_s` 0 never freezes."""

    def __init__(self, settle_s: float):
        self.settle_s = settle_s
        self._task: asyncio.Task[None] | None = None
        self.frozen = 0  # objects frozen by the last freeze (0: not frozen now)

    @property
    def enabled(self) -> bool:
        return self.settle_s > 0

    def freeze_now(self) -> None:
        """One full collection (so no garbage is frozen), then everything tracked goes to the permanent
        generation. Blocking for one full collection's time."""
        if not self.enabled:
            return
        self._cancel()
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.frozen = gc.get_freeze_count()
        logger.info(
            "%d objects frozen out of the garbage collector's full collections (%.0f ms)",
            self.frozen,
            (time.perf_counter() - started) * 1000,
        )

    def changed(self) -> None:
        """A bundle went live or was dropped: collectable again now, frozen again after `settle_s`.
        Call on the event loop."""
        if not self.enabled:
            return
        self._cancel()
        gc.unfreeze()
        self.frozen = 0
        self._task = asyncio.get_running_loop().create_task(self._settle(), name="heap-freeze")

    async def _settle(self) -> None:
        await asyncio.sleep(self.settle_s)
        self._task = None
        self.freeze_now()

    def _cancel(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self._task = None

    async def stop(self) -> None:
        """Cancel a pending freeze and unfreeze: the process (a test runner, an embedding app) gets its
        collector back as it was."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.enabled:
            gc.unfreeze()
            self.frozen = 0
