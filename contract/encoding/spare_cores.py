"""Whether this machine has a core to spare right now: the CPU that processes other than this one use.

A serving worker runs its query encoder on one intra-op thread (app/engine/serving_plan.py: one worker per
core), which is what serves most at 8 and 32 clients. At one client the other cores sit idle. So the ONNX
encoder keeps a second, wider session and runs a batch on it only while the other processes on this
process's cores (the other workers above all) leave enough of them idle (contract/encoding/onnx_encoder.py's
`spare_cores`). Served by `python -m app.serve` on 2 cores (int8, scifact; `python -m bench spare_cores`,
bench/results/spare_cores_scifact.txt, 4 alternated starts): at 1 client p50 0.79-0.88x and 1.16-1.30x the
req/s, the wide session taking 98-99 % of the calls; at 8 and 32 clients it took 0 % and the req/s was
0.98x and 0.99x.

What others use is this process's cores' busy time (/proc/stat's per-CPU lines, counted in the kernel's
clock ticks) less this process's own CPU time (time.process_time), over the last `window` seconds. It is
sampled at most once a window, so asking costs nothing between samples and one read of /proc/stat at a
sample; it lags a change of load by up to a window or two, during which a run may share a core it did not
expect to (no worse than what a fixed wider pool would do all the time). Where /proc/stat
is absent or unreadable (not Linux) no core is ever spare. In a container limited by a CPU quota on a
larger host, the host's other tenants count as others, so it errs towards the narrow session.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PROC_STAT = Path("/proc/stat")
IDLE_FIELDS = (3, 4)  # idle, iowait: the rest of a cpuN line (user nice system ... steal) is busy time
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
WINDOW_S = 0.1
# the cores others may keep busy and a wide run still pays: with 2 cores and a 2-thread run, others at
# 0.5 of a core leave the run's second thread on a core that is half free
SLACK_CORES = 0.5
SMOOTHING = 0.5  # weight of the newest window in `others`


def busy_ticks(stat: str, cpus: set[int]) -> int:
    """Busy clock ticks since boot of `cpus` (numbers), summed from /proc/stat's `cpuN` lines."""
    total = 0
    for line in stat.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        fields = [int(v) for v in rest.split()[:8]]  # guest time is already in user
        total += sum(fields) - sum(fields[i] for i in IDLE_FIELDS)
    return total


class SpareCores:
    """`spare(threads)`: may a run on `threads` intra-op threads have them to itself, as far as others go?"""

    def __init__(
        self,
        *,
        window: float = WINDOW_S,
        read_stat: Callable[[], str] | None = None,
        cpus: set[int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        own_cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.window = window
        self._read_stat = read_stat or PROC_STAT.read_text
        self.cpus = cpus if cpus is not None else _affinity()
        self._clock, self._own_cpu = clock, own_cpu
        self._lock = threading.Lock()
        self.others = float("inf")  # cores in use by other processes over the last window; inf: not known
        self._last = self._sample()

    def _sample(self) -> tuple[float, float, float] | None:
        try:
            busy = busy_ticks(self._read_stat(), self.cpus) / TICKS_PER_S
        except (OSError, ValueError) as exc:
            logger.info(
                "no spare-core probe on this machine (%s): the query encoder stays on its threads", exc
            )
            return None
        return self._clock(), busy, self._own_cpu()

    def spare(self, threads: int) -> bool:
        last = self._last  # read once: a failed sample sets it to None from another thread
        if last is None or threads > len(self.cpus):
            return False
        now = self._clock()
        if now - last[0] >= self.window:
            with self._lock:
                self._update(now)
        return self.others <= len(self.cpus) - threads + SLACK_CORES

    def _update(self, now: float) -> None:
        last = self._last
        if last is None or now - last[0] < self.window:  # another thread sampled meanwhile
            return
        current = self._sample()
        if current is None:
            self._last, self.others = None, float("inf")
            return
        wall = current[0] - last[0]
        others = max(0.0, ((current[1] - last[1]) - (current[2] - last[2])) / wall)  # cores, this window
        # smoothed over windows: one window's count is off by up to a clock tick per CPU (0.1 of a core
        # each at 100 Hz), which alone sent 11 % of one client's runs to the narrow session in an ad-hoc
        # instrumented run (smoothed, bench/results/spare_cores_scifact.txt: 98-99 % on the wide one)
        known = self.others != float("inf")
        self.others = SMOOTHING * others + (1 - SMOOTHING) * self.others if known else others
        self._last = current


def _affinity() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


_probe: SpareCores | None = None
_probe_lock = threading.Lock()


def process_probe() -> SpareCores:
    """The one probe of this process, shared by every encoder that asks (one /proc/stat read a window)."""
    global _probe
    with _probe_lock:
        if _probe is None:
            _probe = SpareCores()
        return _probe


def widen(encoder: Any, threads: int, cores: int) -> None:
    """Give `encoder` (or each side of a routed one) a session of twice its `threads`, up to `cores`, for
    the runs that find them idle. Only encoders with a `spare_cores` method take it (the ONNX ones); twice
    is the measured case (1 -> 2 on 2 cores), wider pools on more cores are not measured."""
    wide = min(cores, 2 * threads)
    if threads > 0 and wide > threads:
        probe = process_probe()
        for part in _parts(encoder):
            if hasattr(part, "spare_cores"):
                part.spare_cores(wide, probe)


def usage(encoder: Any) -> dict[str, Any]:
    """What GET /bundles shows of it: the wide session's `threads` (0: none), and of this process's encoder
    calls since load, `calls` and `wide_calls`. A loaded model is shared by the bundles of one process
    (contract/encoding/shared_models.py), so this is what it has, whoever asked for it."""
    parts = [p for p in _parts(encoder) if getattr(p, "wide", None)]
    return {
        "threads": max((p.wide[1] for p in parts), default=0),
        "calls": sum(p.calls for p in parts),
        "wide_calls": sum(p.wide_calls for p in parts),
    }


def _parts(encoder: Any) -> tuple[Any, ...]:
    return (encoder, *getattr(encoder, "sides", ()))
