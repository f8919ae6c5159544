"""Wall time per pipeline phase: measured where the work happens, printed and saved with the run.

The pipeline passes one `PhaseTimer` through training and indexing; each phase is a `with
timer.phase(name):` block (repeated names add up). `python -m training pipeline` prints `table()` at
the end and the run folder keeps `timings.json`, so the README's time claims come from a printout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from contract.atomic import write_json_atomic

TIMINGS_FILE = "timings.json"


class PhaseTimer:
    """Ordered {phase: seconds}; phases are timed with `phase(name)`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._started = time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    @property
    def total(self) -> float:
        """Seconds since the timer was created (phases plus whatever ran between them)."""
        return time.perf_counter() - self._started

    def table(self) -> str:
        """One line per phase, then the total: what the pipeline prints at its end."""
        total = self.total
        width = max([len(n) for n in self.seconds] + [len("total")])
        lines = [f"{'phase':<{width}}  {'seconds':>8}  {'share':>6}"]
        for name, sec in self.seconds.items():
            lines.append(f"{name:<{width}}  {sec:>8.1f}  {sec / total:>6.1%}")
        other = total - sum(self.seconds.values())
        if other > 0.05:
            lines.append(f"{'other':<{width}}  {other:>8.1f}  {other / total:>6.1%}")
        lines.append(f"{'total':<{width}}  {total:>8.1f}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "phases_s": {n: round(s, 3) for n, s in self.seconds.items()},
            "total_s": round(self.total, 3),
        }

    def write(self, folder: str | Path) -> Path:
        """timings.json in `folder`, written atomically."""
        return write_json_atomic(Path(folder) / TIMINGS_FILE, self.to_json(), newline=True)


def phase(timer: PhaseTimer | None, name: str) -> AbstractContextManager[None]:
    """`timer.phase(name)`, or a no-op when there is no timer (callers outside the pipeline)."""
    return timer.phase(name) if timer is not None else nullcontext()
