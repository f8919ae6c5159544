"""A job worker's resident memory across consecutive retrain jobs: does the second job start where the first left it?

    .venv/bin/python -m training demo-data --out DATA
    nice -n 10 .venv/bin/python -m bench worker_memory WORK --data DATA [--jobs 3] [--set max_steps=10]

A real worker (`python -m training worker`, its jobs on a thread of one process, as deployed) on a SQLite queue
in WORK, and --jobs retrain jobs of the dataset submitted at once into WORK/bundles (the first publishes the
first version, each later one retrains and goes through the gate as a user's would). The worker's resident
memory (VmRSS) is sampled every --interval s from /proc. Printed per job: the RSS when it started, its peak
while it ran, and the RSS when it finished, then the worker's peak (VmHWM) and its RSS once idle. A worker
that keeps each job's leftovers shows a staircase; one that returns them starts every job at about the same
RSS. `--set KEY=VALUE` sets job options (TrainConfig fields and the job's own, values as JSON), e.g.
`--set max_steps=10` for a short recipe (its peaks are then a short run's); the queue validates the options
when the jobs are submitted, before the worker starts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.harness.memory import status_bytes
from bench.harness.paths import REPO
from contract.errors import InfonceSearchError
from contract.jobs.queue import JobQueue

FINAL = ("succeeded", "failed", "cancelled")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A /proc/PID/status memory field of the worker, in MiB."""
    return status_bytes(str(pid), field) / 2**20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="a folder for the queue, the bundles and the worker's log")
    p.add_argument("--data", type=Path, required=True, help="a BEIR dataset folder (the job's dataset)")
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a job option (JSON value)"
    )
    p.add_argument("--timeout", type=float, default=7200, help="seconds for all the jobs")
    args = p.parse_args(argv)
    args.options = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--set {item!r}: expected KEY=VALUE")
        try:
            args.options[key] = json.loads(value)
        except json.JSONDecodeError:
            args.options[key] = value  # a bare word: a string option
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{args.work.resolve() / 'jobs.db'}"
    queue = JobQueue(url)
    data = args.data.resolve()
    submit = dict(data_root=data.parent, bundles_dir=args.work / "bundles")
    try:
        ids = [queue.submit("retrain", data.name, dict(args.options), **submit).id for _ in range(args.jobs)]
    except InfonceSearchError as exc:  # a bad option or dataset, named, before any job is queued
        raise SystemExit(f"worker_memory: {exc}") from None
    print(
        f"{args.jobs} retrain jobs of {data.name} queued, options {args.options or 'the defaults'}",
        flush=True,
    )
    log = args.work / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "training", "worker", "--queue", url, "--nice", "0"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    samples: dict[str, list[float]] = {i: [] for i in ids}
    edges: dict[str, dict[str, float]] = {i: {} for i in ids}
    idle: list[float] = []
    try:
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            states = {i: queue.get(i).state for i in ids}
            rss = rss_mb(worker.pid)
            running = [i for i in ids if states[i] == "running"]
            for i in running:
                samples[i].append(rss)
                edges[i].setdefault("start", rss)
            for i in ids:
                if states[i] in FINAL and samples[i] and "end" not in edges[i]:
                    edges[i]["end"] = rss
            if all(s in FINAL for s in states.values()):
                time.sleep(5.0)  # the worker at rest after the last job
                idle.append(rss_mb(worker.pid))
                break
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited ({worker.returncode}): {log.read_text()[-2000:]}")
            time.sleep(args.interval)
        peak = rss_mb(worker.pid, "VmHWM")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    _print(queue, ids, samples, edges, peak, idle)


def _print(
    queue: JobQueue,
    ids: list[str],
    samples: dict[str, list[float]],
    edges: dict[str, dict[str, float]],
    peak: float,
    idle: list[float],
) -> None:
    print("\n| job | state | s | RSS at start (MiB) | peak while running (MiB) | RSS at the end (MiB) |")
    print("|---:|---|---:|---:|---:|---:|")
    for n, i in enumerate(ids, 1):
        job = queue.get(i)
        took = job.duration_s or 0
        e, s = edges[i], samples[i]
        print(
            f"| {n} | {job.state} | {took:.0f} | {e.get('start', 0):.0f} | {max(s, default=0):.0f} | "
            f"{e.get('end', 0):.0f} |"
        )
    print(
        f"\nworker: peak (VmHWM) {peak:.0f} MiB, RSS at rest after the last job {idle[0] if idle else 0:.0f} MiB"
    )
