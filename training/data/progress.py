"""Where a long phase says how far it is: `report(phase, done, total)`, read by whoever listens (a job).

A worker job listens (training/jobs/heartbeat.py: fraction, ETA from the phase's own rate, written to the
job record); a terminal run does not, and `report` costs one lookup. The listener is a context variable
set around the job (`reporting_to`), not a keyword on every function between the job and the loops that
count: the corpus encode, the distillation steps and the phases of index_model sit five calls below any
RunHooks, and a reindex showed phase "index" with an empty bar from 5 s to 598 s while the distillation
logged "step 200/402" (issue 44, item 3). A context variable is per thread, so the jobs a worker runs on
its threads never see each other's listener. It sits in the lowest layer (data) so that every layer that
counts (eval's encode, export's shards, train, distill) may report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

ENCODE_PHASE = "encode corpus"  # the corpus encode, wherever it runs (evaluate's or the shard writer's)
Listener = Callable[[str, int, "int | None"], None]  # (phase, done, total or None when not counted)

_LISTENER: ContextVar[Listener | None] = ContextVar("progress_listener", default=None)


@contextmanager
def reporting_to(listener: Listener) -> Iterator[None]:
    """Send every `report` made in this thread (context) to `listener` until the block ends."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def report(phase: str, done: int = 0, total: int | None = None) -> None:
    """`phase` has `done` of `total` units behind it (total None: a phase that is not counted)."""
    listener = _LISTENER.get()
    if listener is not None:
        listener(phase, done, total)
