"""Bounded, off-event-loop execution of searches, with or without dynamic micro-batching.

All model and FAISS work runs on one inference thread (`Inference.executor`): on a 2-core box the
encoder's own intra-op threads already use both cores, and more request threads only thrash
(bench/serving/load_bench.py: torch throughput fell 10-17% from 8 to 32 concurrent requests). Two
inference threads, each taking its own micro-batch to a one-thread ONNX session, served 0.77-0.92x of one
thread with two intra-op threads at 32 clients and 0.81-0.90x at 1 (pycode, int8, one process; an ad-hoc
probe, two alternated rounds), probably because the two batches' Python contends for the GIL (not profiled).

`MicroBatcher`: requests wait in a bounded asyncio queue; one worker takes whatever is pending (up to
`max_size` queries), encodes every text in one call and searches the batch as one FAISS call
(`LiveBundle.answer_batch`). Requests that arrive while a batch runs form the next one.

How long a batch waits for more: a lone client (last batch of one query) never waits. Otherwise the
batch waits, at most `max_wait`, until it holds min(the previous batch's queries, the live encoder's
`encode_batch_size`) queries: a larger batch is encoded in chunks of that size anyway, so waiting for
more would only idle the encoder. ONNX encoders never wait (`LiveBundle.batch_wait`): they batch what is
pending, but a batch saves them too little to idle for. Without the wait, load splits into
alternating large and tiny batches: while a batch of 30 runs only the 2 clients outside it can queue,
the next batch takes just those 2, and the 30 answered clients' new requests, still being parsed on
the event loop, miss it (measured: 32 clients, torch, 19 of 39 batches held 2 queries, each costing
nearly a whole single-query encode per query). Waiting ends the moment the target is met, and the
target follows the load down within one batch.
Exact search only gains from batches with FAISS's BLAS threshold lowered; `contract.index.vector_index` does that.

Fairness (app/engine/token_slicing.py): a big request arrives as slices (`_Pending.sliced`). A batch is
the single-slice requests waiting, or else one slice alone, so a single query waits for the slice in
flight only and two big clients' slices are not merged into one long batch ahead of it
(bench/serving/fairness_bench.py, bench/results/fairness_bench.txt).

`DirectRunner`: the per-request path (micro-batching off), same executor and the same bound.
A full queue is refused at once with `QueueFullError` (429) instead of growing latency without limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from app.engine.live_bundle import LiveBundle
from app.engine.search_spec import Answer, EmbedAnswer, EmbedSpec, SearchAnswer, SearchSpec, Spec
from app.engine.token_slicing import run_sliced
from app.errors import QueueFullError
from app.metrics import AppMetrics

logger = logging.getLogger(__name__)
T = TypeVar("T")
# batches of small requests that may run ahead of a waiting slice before it joins one anyway: with slices of
# 8 queries a single query still waits for at most one slice, and a big request under a steady stream of
# small ones still advances one slice per SLICE_PASSES + 1 batches
SLICE_PASSES = 8


class Inference:
    """The one thread that runs model / FAISS / document-store work."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


@dataclass
class _Pending:
    live: LiveBundle
    spec: Spec
    future: asyncio.Future[Answer]
    enqueued: float = field(default_factory=time.perf_counter)
    sliced: bool = False  # one slice of a big request (app/engine/token_slicing.py): runs after single ones
    passed: int = 0  # batches that ran ahead of this slice (SLICE_PASSES)


class _Runner:
    """What both runners share: a request runs in slices of at most `slice_tokens` tokens and
    `slice_queries` queries (app/engine/token_slicing.py), each queued on its own through `_submit`."""

    slice_tokens: int
    slice_queries: int | None = None

    @overload
    async def submit(self, live: LiveBundle, spec: SearchSpec) -> SearchAnswer: ...

    @overload
    async def submit(self, live: LiveBundle, spec: EmbedSpec) -> EmbedAnswer: ...

    async def submit(self, live: LiveBundle, spec: Spec) -> Answer:
        return await run_sliced(
            lambda part, sliced: self._submit(live, part, sliced), spec, self.slice_tokens, self.slice_queries
        )

    async def _submit(self, live: LiveBundle, spec: Spec, sliced: bool = False) -> Answer:
        raise NotImplementedError


class DirectRunner(_Runner):
    """Micro-batching off: each request encodes and searches on its own (bounded by `queue_max`)."""

    def __init__(
        self,
        inference: Inference,
        *,
        queue_max: int,
        metrics: AppMetrics,
        slice_tokens: int = 256,
        slice_queries: int | None = None,
    ):
        self.inference = inference
        self.queue_max = queue_max
        self.metrics = metrics
        self.slice_tokens = slice_tokens  # big requests run in slices (app/engine/token_slicing.py)
        self.slice_queries = slice_queries
        self._waiting = 0

    def pending(self) -> int:
        return self._waiting

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def _submit(self, live: LiveBundle, spec: Spec, sliced: bool = False) -> Answer:
        if self._waiting >= self.queue_max:
            raise QueueFullError(
                f"server busy: {self._waiting} searches waiting (queue_max {self.queue_max}); retry"
            )
        self._waiting += 1
        self.metrics.queue_depth.set(self._waiting)
        try:
            self.metrics.batch_queries.observe(spec.n)
            answer = await self.inference.call(live.answer, spec)
            self.metrics.observe_work(
                answer.encode_ms, answer.search_ms, searched=isinstance(spec, SearchSpec)
            )
            return answer
        finally:
            self._waiting -= 1
            self.metrics.queue_depth.set(self._waiting)


class MicroBatcher(_Runner):
    """Dynamic micro-batching over one bounded queue (see module docstring)."""

    def __init__(
        self,
        inference: Inference,
        *,
        max_size: int,
        max_wait_s: float,
        queue_max: int,
        metrics: AppMetrics,
        slice_tokens: int = 256,
        slice_queries: int | None = None,
    ):
        self.inference = inference
        self.slice_tokens = slice_tokens  # big requests run in slices (app/engine/token_slicing.py)
        self.slice_queries = slice_queries
        self._held: list[_Pending] = []  # slices taken from the queue, waiting for a batch of their own
        self.max_size = max_size
        self.max_wait_s = max_wait_s
        self.metrics = metrics
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_max)
        self._task: asyncio.Task[None] | None = None
        self.in_flight = 0  # requests taken from the queue and not answered yet
        self._last_batch = 1  # queries in the previous batch: the size the next one waits for

    def pending(self) -> int:
        return self.queue.qsize() + len(self._held)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._worker(), name="micro-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while self._held or not self.queue.empty():  # nobody will answer these now
            item = self._held.pop() if self._held else self.queue.get_nowait()
            if not item.future.done():
                item.future.set_exception(QueueFullError("server shutting down"))

    async def _submit(self, live: LiveBundle, spec: Spec, sliced: bool = False) -> Answer:
        item = _Pending(live, spec, asyncio.get_running_loop().create_future(), sliced=sliced)
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            raise QueueFullError(
                f"server busy: the batching queue is full ({self.queue.maxsize} requests waiting); retry"
            ) from None
        self.metrics.queue_depth.set(self.queue.qsize())
        return await item.future

    async def _collect(self) -> list[_Pending]:
        """The next batch: the single-slice requests waiting (waiting for more as the module docstring
        says), else one slice of a big request. Slices met meanwhile are held back, so a small request
        waits for the slice in flight at most, and big requests take turns slice by slice; a slice passed
        over SLICE_PASSES times joins the next batch anyway (no starvation under a stream of small ones)."""
        if not self._held:
            self._held.append(await self.queue.get())
        while not self.queue.empty():
            self._held.append(self.queue.get_nowait())
        batch = [i for i in self._held if not i.sliced][: self.max_size]
        if not batch:
            batch = [self._held[0]]
        else:
            n = sum(i.spec.n for i in batch)
            first = batch[0]
            target = min(self._last_batch, first.live.batch_wait, self.max_size)  # module docstring
            await self._wait_for_more(batch, n, target)
            overdue = next((i for i in self._held if i.sliced and i.passed >= SLICE_PASSES), None)
            if overdue is not None:
                batch.append(overdue)
        taken = {id(i) for i in batch}
        self._held = [i for i in self._held if id(i) not in taken]
        for i in self._held:
            i.passed += 1
        self.metrics.queue_depth.set(self.pending())
        self._last_batch = sum(i.spec.n for i in batch)
        return batch

    async def _wait_for_more(self, batch: list[_Pending], n: int, target: int) -> None:
        """Add single-slice requests that arrive within max_wait until `target` queries (slices are held)."""
        deadline = time.perf_counter() + self.max_wait_s
        while n < min(target, self.max_size):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            try:
                item = await asyncio.wait_for(self.queue.get(), remaining)
            except TimeoutError:
                return
            if item.sliced:
                self._held.append(item)
            else:
                batch.append(item)
                n += item.spec.n

    async def _worker(self) -> None:
        while True:
            batch = await self._collect()
            self.in_flight = len(batch)
            try:
                await self._run(batch)
            except Exception as exc:  # never let the worker die: fail this batch, keep serving
                logger.exception("micro-batch failed")
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
            finally:
                self.in_flight = 0

    async def _run(self, batch: list[_Pending]) -> None:
        groups: dict[int, list[_Pending]] = {}
        for item in batch:  # in-flight requests keep the bundle they started with
            if item.future.done():  # the client went away
                continue
            groups.setdefault(id(item.live), []).append(item)
        for items in groups.values():
            self.metrics.batch_queries.observe(sum(i.spec.n for i in items))
            try:
                answers = await self.inference.call(items[0].live.answer_batch, [i.spec for i in items])
            except Exception as exc:  # e.g. the encoder failed: every request of the group fails alike
                answers = [exc] * len(items)
            done = next((a for a in answers if not isinstance(a, BaseException)), None)
            if done is not None:  # encode and search times are shared by the group: observed once
                searched = any(isinstance(i.spec, SearchSpec) for i in items)
                self.metrics.observe_work(done.encode_ms, done.search_ms, searched=searched)
            for item, answer in zip(items, answers, strict=True):
                if item.future.done():
                    continue
                if isinstance(answer, BaseException):
                    item.future.set_exception(answer)
                else:
                    item.future.set_result(answer)
