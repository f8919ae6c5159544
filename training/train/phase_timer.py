"""Wall time per pipeline phase: measured where the work happens, printed and saved with the run.

The pipeline passes one `PhaseTimer` through training and indexing; each phase is a `with
timer.phase(name):` block (repeated names add up). `python -m training pipeline` prints `table()` at
the end and the run folder keeps `timings.json`, so the time claims in docs/benchmarks.md come from a printout.

Loops that run in steps (training) also feed a `StepMeter`: while they run it logs, at most every
`interval_s`, the steps done, steps/s and the projected time to finish; at the end the phase's steps/s goes
into the table. The table ends with the process's peak resident memory (VmHWM: what the run held at its
largest, every phase included); timings.json also keeps that peak as it stood at the end of each phase, so
the phase that raised it is the first whose value jumps (the retrain-cost issue caps a default run at 3 GB;
docs/training.md, "Peak memory"). Every phase end also hands the heap it freed back to the system
(training/train/heap.py), so one phase's peak does not stack on the memory an earlier one freed.
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from contract.atomic import write_json_atomic
from training.data import progress
from training.train.heap import trim_heap

TIMINGS_FILE = "timings.json"
logger = logging.getLogger(__name__)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB: Linux's VmHWM (/proc/self/status), else ru_maxrss
    (KiB on Linux, bytes on macOS). VmHWM first because ru_maxrss survives fork and exec: a run started as
    a subprocess of a large process (a test runner, a worker) reported that parent's peak as its own."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


class PhaseTimer:
    """Ordered {phase: seconds}; phases are timed with `phase(name)`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.steps: dict[str, int] = {}  # phases that run in steps (StepMeter): steps done
        self.notes: dict[str, object] = {}  # what else timings.json records (a time budget and its use)
        self._peak_ends: list[tuple[str, float]] = []  # (phase, peak RSS MiB) at every phase end, in order
        self.started = time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        """A phase's end: its seconds (added to earlier runs of the same name), the process's peak memory so
        far, and the heap it freed returned to the system (training/train/heap.py), so that the next phase's
        peak does not stack on this one's."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self._peak_ends.append((name, round(peak_rss_mb(), 1)))
        trim_heap()

    @property
    def total(self) -> float:
        """Seconds since the timer was created (phases plus whatever ran between them)."""
        return time.perf_counter() - self.started

    def table(self) -> str:
        """One line per phase, then the total: what the pipeline prints at its end."""
        total = self.total
        width = max([len(n) for n in self.seconds] + [len("total")])
        lines = [f"{'phase':<{width}}  {'seconds':>8}  {'share':>6}  {'steps/s':>7}"]
        for name, sec in self.seconds.items():
            rate = f"{self.steps[name] / sec:>7.3f}" if name in self.steps and sec > 0 else ""
            lines.append(f"{name:<{width}}  {sec:>8.1f}  {sec / total:>6.1%}  {rate}".rstrip())
        other = total - sum(self.seconds.values())
        if other > 0.05:
            lines.append(f"{'other':<{width}}  {other:>8.1f}  {other / total:>6.1%}")
        lines.append(f"{'total':<{width}}  {total:>8.1f}")
        where = self.peak_phase()
        lines.append(
            f"peak resident memory {peak_rss_mb():,.0f} MiB" + (f" (reached in: {where})" if where else "")
        )
        return "\n".join(lines)

    @property
    def peak_rss_after(self) -> dict[str, float]:
        """{phase: the process's peak RSS (MiB) at that phase's last end}."""
        return dict(self._peak_ends)

    def peak_phase(self) -> str | None:
        """The phase at whose end the process's peak RSS had first reached its value now (None: no phase
        ran, or the peak came after the last one): where to look when a run holds too much memory."""
        final = round(peak_rss_mb(), 1)
        return next((name for name, peak in self._peak_ends if peak >= final), None)

    def to_json(self) -> dict[str, object]:
        return {
            "phases_s": {n: round(s, 3) for n, s in self.seconds.items()},
            "steps": dict(self.steps),
            "total_s": round(self.total, 3),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "peak_rss_mb_after": self.peak_rss_after,
            "peak_rss_phase": self.peak_phase(),
            **self.notes,
        }

    def write(self, folder: str | Path) -> Path:
        """timings.json in `folder`, written atomically."""
        return write_json_atomic(Path(folder) / TIMINGS_FILE, self.to_json(), newline=True)


def phase(timer: PhaseTimer | None, name: str) -> AbstractContextManager[None]:
    """`timer.phase(name)`, or a no-op when there is no timer (callers outside the pipeline); either way
    the phase's start is reported (training/data/progress.py), so a job's record names it."""
    progress.report(name)
    return timer.phase(name) if timer is not None else nullcontext()


class StepMeter:
    """Steps of one phase: logs progress, steps/s and the projected time left while it runs, and records
    the steps in the timer (its table shows steps/s). `total` may shrink (early stopping)."""

    def __init__(
        self, name: str, total: int, timer: PhaseTimer | None = None, *, interval_s: float = 30.0
    ) -> None:
        self.name, self.total, self.timer, self.interval_s = name, total, timer, interval_s
        self.done = 0
        self._started = time.perf_counter()
        self._last_log = self._started

    @property
    def rate(self) -> float:
        """Steps per second so far (0 before the first step)."""
        elapsed = time.perf_counter() - self._started
        return self.done / elapsed if elapsed > 0 else 0.0

    def eta_s(self) -> float:
        """Projected seconds to the last step at the rate so far."""
        rate = self.rate
        return (self.total - self.done) / rate if rate > 0 else float("inf")

    def step(self) -> None:
        self.done += 1
        now = time.perf_counter()
        if now - self._last_log >= self.interval_s and self.done < self.total:
            self._last_log = now
            logger.info(
                "%s: %d/%d steps, %.3f steps/s, %.0f s so far, ~%.0f s to finish",
                self.name, self.done, self.total, self.rate, now - self._started, self.eta_s(),
            )  # fmt: skip

    def close(self) -> None:
        if self.timer is not None:
            self.timer.steps[self.name] = self.timer.steps.get(self.name, 0) + self.done
