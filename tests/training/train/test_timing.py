"""Phase wall times: recorded per phase, printed by the pipeline, written into the run folder."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from training.data.demo_data import build_demo_dataset
from training.train.phase_timer import TIMINGS_FILE, PhaseTimer, StepMeter, phase


def test_phases_add_up_and_are_written(tmp_path):
    timer = PhaseTimer()
    with timer.phase("a"):
        time.sleep(0.02)
    with phase(timer, "a"):  # a repeated phase adds up
        time.sleep(0.02)
    with phase(None, "ignored"):  # no timer: a no-op
        pass
    with pytest.raises(RuntimeError), timer.phase("b"):  # a failing phase is still timed
        raise RuntimeError("boom")
    assert list(timer.seconds) == ["a", "b"]
    assert timer.seconds["a"] >= 0.04
    saved = json.loads(timer.write(tmp_path).read_text())
    assert set(saved["phases_s"]) == {"a", "b"} and saved["total_s"] >= saved["phases_s"]["a"]
    table = timer.table()
    assert table.splitlines()[0].split() == ["phase", "seconds", "share", "steps/s"]
    assert table.splitlines()[-2].startswith("total")
    assert table.splitlines()[-1].startswith("peak resident memory") and saved["peak_rss_mb"] > 0


def test_a_step_meter_reports_rate_and_time_left(caplog):
    import logging

    timer = PhaseTimer()
    with caplog.at_level(logging.INFO, logger="training.train.phase_timer"), timer.phase("steps"):
        meter = StepMeter("steps", total=4, timer=timer, interval_s=0.0)
        for _ in range(3):
            time.sleep(0.01)
            meter.step()
        meter.close()
    assert timer.steps["steps"] == 3 and 0 < meter.rate < 150
    assert "2/4 steps" in caplog.text and "steps/s" in caplog.text and "to finish" in caplog.text
    row = next(line for line in timer.table().splitlines() if line.startswith("steps"))
    assert float(row.split()[-1]) == pytest.approx(3 / timer.seconds["steps"], rel=1e-3)


def test_pipeline_on_the_demo_dataset_prints_and_saves_its_phase_times(tmp_path):
    """The demo's own path, on no data but this Python's: the pipeline publishes and reports each phase."""
    data = build_demo_dataset(tmp_path / "pydocs", n_docs=40, n_test=8)
    cmd = [
        sys.executable, "-m", "training", "pipeline",
        "--data", str(data), "--bundles", str(tmp_path / "bundles"), "--work-dir", str(tmp_path / "runs"),
        "--no-onnx", "--quiet", "--max-steps", "2", "--batch-size", "4", "--max-seq-length", "32",
        "--epochs", "1",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = next((tmp_path / "runs").glob("run-*"))
    # each model's corpus encoding went once into the work dir's cache: the base's and the tuned one's
    assert len(list((tmp_path / "runs" / "embeddings").glob("*.npy"))) == 2
    phases = json.loads((run / TIMINGS_FILE).read_text())["phases_s"]
    expected = {
        "encode + evaluate (base)",
        "mine negatives",
        "train steps",
        "encode + evaluate (tuned)",
        "gap report",
        "index + bundle",
        "publish",
    }
    expected.add("distill query encoders")  # the static query tower is built by default, its cost shown
    assert expected <= set(phases), phases
    assert all(seconds >= 0 for seconds in phases.values())
    for name in expected:  # the printed table names every phase
        assert name in done.stdout
    assert " live " in done.stdout
    assert "steps/s" in done.stdout and "peak resident memory" in done.stdout

    # again, tower auto: the live bundle holds this corpus, so only a query tower trains (no corpus encode)
    again = subprocess.run(
        [*cmd, "--tower", "auto", "--no-distill", "--query-batch-size", "4"], capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "query-side retrain" in again.stdout and "query tower steps" in again.stdout
    second = max((tmp_path / "runs").glob("run-*"))
    phases = json.loads((second / TIMINGS_FILE).read_text())
    assert not {"encode + evaluate (base)", "encode + evaluate (tuned)"} & set(phases["phases_s"])
    assert phases["steps"]["query tower steps"] == 2  # --max-steps caps the query tower's steps too


def test_the_phase_that_raised_the_peak_memory_is_named(tmp_path):
    """A child process, 400 MB held in one of its phases: the phase is named, and the peaks are the
    child's own, not its parent's (ru_maxrss survives fork and exec; the suite's runner holds GBs)."""
    script = (
        "import json, sys, numpy as np\n"
        "from training.train.phase_timer import PhaseTimer\n"
        "t = PhaseTimer()\n"
        "with t.phase('small'): a = np.ones(1000)\n"
        "with t.phase('after'): c = np.ones(1000)\n"  # ended once before the peak: not the one named
        "with t.phase('big'): b = np.ones(50_000_000); del b\n"  # 400 MB, pages touched
        "with t.phase('after'): c = np.ones(1000)\n"
        "print(json.dumps(t.to_json()))\n"
    )
    ballast = np.ones(40_000_000)  # 305 MiB in this process: ru_maxrss would carry it into the child
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    del ballast
    saved = json.loads(out.stdout.splitlines()[-1])
    after = saved["peak_rss_mb_after"]
    assert after["small"] < 250  # the child's own peak (numpy and this module), not its parent's
    # most of the 381 MiB show up at the end of the phase that held them; a peak never falls after it
    assert after["big"] - after["small"] > 250 and after["after"] == after["big"]
    assert saved["peak_rss_phase"] == "big"


def test_a_phase_end_returns_the_freed_heap_to_the_system():
    """A child process frees 300 MB of small heap blocks under a live one: glibc keeps the pages (RSS stays
    up) until a phase ends, when training/train/heap.py hands them back. The oracle is /proc's VmRSS."""
    script = (
        "import json\n"
        "from training.train.phase_timer import PhaseTimer\n"
        "def rss(): return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) / 1024\n"
        "t = PhaseTimer()\n"
        "blocks = [bytearray(100_000) for _ in range(3000)]\n"  # under the mmap threshold: the heap
        "pin = bytearray(100_000)\n"  # above them, so the heap's top cannot shrink on its own
        "before = rss(); del blocks; freed = rss()\n"
        "with t.phase('p'): pass\n"
        "print(json.dumps({'before': before, 'freed': freed, 'after': rss()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    mb = json.loads(out.stdout.splitlines()[-1])
    assert mb["before"] - mb["freed"] < 100  # freed, but still resident
    assert mb["freed"] - mb["after"] > 200  # returned at the phase's end
