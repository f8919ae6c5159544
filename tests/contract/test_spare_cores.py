"""The spare-core probe: what other processes use of this process's cores, from /proc/stat and own CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from contract.encoding import spare_cores
from contract.encoding.spare_cores import SpareCores, busy_ticks

STAT = """cpu  900 0 90 9000 10 0 5 0 0 0
cpu0 100 1 10 1000 5 0 2 3 0 0
cpu1 200 0 20 2000 5 0 1 0 0 0
cpu2 400 0 40 4000 0 0 2 0 0 0
intr 12345
ctxt 999
"""


def test_busy_ticks_sums_the_non_idle_fields_of_the_chosen_cpus():
    # cpu0: user 100 + nice 1 + system 10 + irq 0 + softirq 2 + steal 3 (idle and iowait left out)
    assert busy_ticks(STAT, {0}) == 116
    assert busy_ticks(STAT, {0, 1}) == 116 + 221
    assert busy_ticks(STAT, {5}) == 0  # not in this stat: the aggregate `cpu` line never counts


class Machine:
    """A /proc/stat whose busy ticks and this process's CPU the test sets, on a clock it moves."""

    def __init__(self) -> None:
        self.now, self.busy, self.own, self.reads = 0.0, 0, 0.0, 0

    def stat(self) -> str:
        self.reads += 1
        return f"cpu0 {self.busy} 0 0 100 0 0 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0 0 0\n"

    def advance(self, seconds: float, *, others: float, own: float) -> None:
        """`seconds` pass, other processes using `others` cores and this one `own` cores."""
        self.now += seconds
        self.own += own * seconds
        self.busy += round((others + own) * seconds * spare_cores.TICKS_PER_S)


def probe(machine: Machine) -> SpareCores:
    return SpareCores(
        window=0.1,
        read_stat=machine.stat,
        cpus={0, 1},
        clock=lambda: machine.now,
        own_cpu=lambda: machine.own,
    )


def test_a_core_is_spare_only_while_others_leave_it_idle():
    m = Machine()
    p = probe(m)
    assert not p.spare(2)  # nothing measured yet
    m.advance(1.0, others=0.1, own=1.0)  # one client: this worker busy, the other idle
    assert p.spare(2) and p.others == pytest.approx(0.1, abs=0.02)
    m.advance(1.0, others=1.0, own=1.0)  # the other worker is busy too
    assert not p.spare(2)
    m.advance(1.0, others=0.3, own=2.0)  # this process's own threads never count against it
    assert p.spare(2)
    assert not p.spare(3)  # more threads than it may use


def test_one_noisy_window_does_not_flip_it_a_lasting_change_does():
    m = Machine()
    p = probe(m)
    m.advance(0.1, others=0.1, own=1.0)
    assert p.spare(2)
    m.advance(0.1, others=0.8, own=1.0)  # a tick or two too many in one window
    assert p.spare(2) and p.others == pytest.approx(0.45, abs=0.06)
    m.advance(0.1, others=1.0, own=1.0)  # the other worker really is busy now
    assert not p.spare(2)


def test_it_reads_proc_stat_once_a_window_whatever_the_calls():
    m = Machine()
    p = probe(m)
    m.advance(0.2, others=0.0, own=1.0)
    for _ in range(50):
        p.spare(2)
    m.advance(0.05, others=2.0, own=0.0)  # inside the window: the old answer stands
    assert p.spare(2) and m.reads == 2


def test_without_proc_stat_no_core_is_ever_spare():
    def unreadable() -> str:
        raise OSError("no /proc/stat")

    p = SpareCores(read_stat=unreadable, cpus={0, 1})
    time.sleep(0.12)
    assert not p.spare(2)


@pytest.mark.skipif(
    not os.path.exists("/proc/stat") or len(os.sched_getaffinity(0)) != 2, reason="2 cores, Linux"
)
def test_a_process_spinning_on_one_of_two_cores_takes_the_spare_core_away():
    """The real /proc/stat: another process keeping a core busy is seen as about one core of others."""
    p = SpareCores(window=0.2)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # the spinner is running
        p.spare(2)  # a sample that starts a window with it running
        time.sleep(0.6)
        assert not p.spare(2)
        assert p.others > 0.6
    finally:
        spinner.kill()
        spinner.wait()
