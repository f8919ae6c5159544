"""Scale-out on loopback: two API processes on one bundles folder, one worker on a Redis queue.

    flock "$HEAVY_LOCK" .venv/bin/python -m bench scaleout [--data ../shared/data/scifact]

What it does, all on 127.0.0.1 and all stopped at the end (or after --max-seconds):

1. writes a small scifact slice (BEIR folder) under a fresh data root;
2. starts redis-server on a free port, two real `uvicorn --factory app.main:create_app` processes on
   one (empty) bundles folder, and one `python -m training worker`, all with SEARCH_QUEUE_URL=redis://…;
3. submits a retrain on a tiny budget through API 1 and follows it on API 2 (job records live in
   Redis); the worker publishes the first bundle and both APIs go from 503 to ready, like a fresh
   compose deployment after bootstrap;
4. keeps querying POST /search through a round-robin client over both APIs, and submits a second
   retrain (same budget) while it does;
5. waits until both APIs serve the bundle the worker published, queries a little longer, then prints
   the failed-request count (should be 0) and the version each API served before and after.

Both retrains use the same config and seed, so their test metrics match and the quality gate lets the
second through; what is measured here is the hand-over, not model quality.
Results go to bench/results/scaleout.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.harness.paths import REPO, RESULTS, SCIFACT
from bench.harness.ports import free_port

API_KEY = "scaleout-bench"
# Tiny, deterministic training budget shared by the first bundle and the retrain (see docstring).
BUDGET = {"max_steps": 2, "epochs": 1, "batch_size": 8, "eval_max_queries": 8, "seed": 0}


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise TimeoutError(f"gave up waiting for {what} (--max-seconds reached)")


class Proc:
    """A child process with its output in a log file; stop() is idempotent."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], logs: Path):
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log = self.log_path.open("w")
        self.popen = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._log.close()


def wait_port(port: int, proc: Proc, deadline: Deadline) -> None:
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        deadline.check(f"{proc.name} to listen on {port}")
        time.sleep(0.2)


def ready_version(client: httpx.Client, base: str) -> str | None:
    try:
        response = client.get(f"{base}/readyz", timeout=10)
    except httpx.HTTPError:
        return None
    return response.json()["version"] if response.status_code == 200 else None


class QueryLoad:
    """Round-robin POST /search over the APIs until stopped; records every outcome."""

    def __init__(self, bases: list[str], queries: list[str], rate: float):
        self.bases, self.queries, self.rate = bases, queries, rate
        self.outcomes: list[tuple[float, int, int, str]] = []  # (time, api index, status, version or error)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="query-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        i = 0
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                api = i % len(self.bases)
                body = {"query": self.queries[i % len(self.queries)], "top_k": 5}
                try:
                    response = client.post(f"{self.bases[api]}/search", json=body)
                    detail = (
                        response.json().get("version", "") if response.status_code == 200 else response.text
                    )
                    self.outcomes.append((time.monotonic(), api, response.status_code, detail[:200]))
                except httpx.HTTPError as exc:
                    self.outcomes.append((time.monotonic(), api, 0, f"{type(exc).__name__}: {exc}"))
                i += 1
                self._stop.wait(1.0 / self.rate)


def build_slice(scifact: Path, data_root: Path) -> tuple[Path, list[str]]:
    from training.data.beir import load_beir
    from training.data.beir_slice import beir_slice

    folder = beir_slice(scifact, data_root / "slice", n_train=16, n_test=8, n_distractors=40)
    queries = list(load_beir(folder, "test").queries.values()) + list(
        load_beir(folder, "train").queries.values()
    )
    return folder, queries


def run_job(
    client: httpx.Client, bases: list[str], worker: Proc, deadline: Deadline
) -> tuple[dict[str, Any], float]:
    """Submit a retrain to API 1, follow it on API 2 (the records live in Redis); (record, seconds)."""
    response = client.post(
        f"{bases[0]}/jobs",
        json={"type": "retrain", "dataset": "slice", "options": BUDGET},
        headers={"X-API-Key": API_KEY},
    )
    if response.status_code != 202:
        raise RuntimeError(f"POST /jobs answered {response.status_code}: {response.text}")
    job_id = response.json()["id"]
    started = time.monotonic()
    print(f"retrain job {job_id} submitted to api1", flush=True)
    job: dict[str, Any] = {}
    last_phase = ""
    while job.get("state") not in ("succeeded", "failed", "cancelled"):
        if not worker.alive():
            raise RuntimeError(f"worker exited:\n{worker.tail()}")
        deadline.check(f"job {job_id}")
        time.sleep(1.0)
        job = client.get(f"{bases[1]}/jobs/{job_id}").json()
        phase = f"{job.get('state')}/{job.get('progress', {}).get('phase')}"
        if phase != last_phase:
            print(f"  job {phase} (+{time.monotonic() - started:.1f} s)", flush=True)
            last_phase = phase
    if job["state"] != "succeeded" or not job.get("live"):
        raise RuntimeError(f"retrain did not publish: {json.dumps(job)[:2000]}")
    return job, time.monotonic() - started


def wait_serving(client: httpx.Client, bases: list[str], version: str, deadline: Deadline) -> list[float]:
    """Poll every API's /readyz until it serves `version`; the monotonic time each one did."""
    seen: list[float | None] = [None] * len(bases)
    while None in seen:
        for i, base in enumerate(bases):
            if seen[i] is None and ready_version(client, base) == version:
                seen[i] = time.monotonic()
        deadline.check(f"every API serving {version}")
        time.sleep(0.2)
    return [t for t in seen if t is not None]


def start_processes(
    args: argparse.Namespace,
    work: Path,
    data_root: Path,
    bundles: Path,
    procs: list[Proc],
    deadline: Deadline,
) -> tuple[list[str], Proc]:
    """Redis, two APIs and a worker on loopback, each appended to procs as it starts (the caller stops them)."""
    logs = work / "logs"
    base_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    redis_port = free_port()
    redis = Proc(
        "redis",
        [args.redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(work)],
        base_env, logs,
    )  # fmt: skip
    procs.append(redis)
    wait_port(redis_port, redis, deadline)
    env = {
        **base_env,
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_DATA_ROOT": str(data_root),
        "SEARCH_QUEUE_URL": f"redis://127.0.0.1:{redis_port}/0",
        "SEARCH_API_KEY": API_KEY,
        "SEARCH_RELOAD_POLL_SECONDS": "0.5",
        "SEARCH_ENCODER_THREADS": "1",
    }
    ports = [free_port(), free_port()]
    apis = []
    for n, port in enumerate(ports, start=1):
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app",
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        apis.append(Proc(f"api{n}", cmd, env, logs))
    procs += apis
    worker = Proc("worker", [sys.executable, "-m", "training", "worker"], env, logs)
    procs.append(worker)
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    for api, port in zip(apis, ports, strict=True):
        wait_port(port, api, deadline)
    return bases, worker


def result_of(
    outcomes: list, job: dict[str, Any], job_s: float, before: list, after: list, swap_lags: list[float]
) -> dict[str, Any]:
    failed = [o for o in outcomes if o[2] != 200]
    served = [dict(Counter(o[3] for o in outcomes if o[1] == i and o[2] == 200)) for i in range(2)]
    return {
        "requests": len(outcomes),
        "failed": len(failed),
        "failures": [{"api": o[1] + 1, "status": o[2], "detail": o[3]} for o in failed[:20]],
        "job_id": job["id"],
        "job_seconds": round(job_s, 1),
        "gate_reason": job.get("gate_reason"),
        "apis": [
            {
                "api": i + 1,
                "before": before[i],
                "after": after[i],
                "swap_lag_after_job_s": round(swap_lags[i], 2),
                "answers_per_version": served[i],
            }
            for i in range(2)
        ],
    }


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    deadline = Deadline(args.max_seconds)
    (work / "logs").mkdir(parents=True)
    data_root, bundles = work / "data", work / "bundles"
    bundles.mkdir()
    slice_dir, queries = build_slice(args.data, data_root)
    print(f"slice: {slice_dir} ({len(queries)} queries)", flush=True)

    procs: list[Proc] = []
    try:
        bases, worker = start_processes(args, work, data_root, bundles, procs, deadline)

        with httpx.Client(timeout=30) as client:
            # First bundle: the APIs start on an empty folder (503) and pick it up when the job publishes,
            # as a fresh compose deployment does after bootstrap.
            first, first_s = run_job(client, bases, worker, deadline)
            wait_serving(client, bases, first["bundle_version"], deadline)
            before = [ready_version(client, base) for base in bases]
            print(f"ready after {first_s:.1f} s job: api1={before[0]} api2={before[1]}", flush=True)

            load = QueryLoad(bases, queries, args.rate)
            load.start()
            try:
                job, job_s = run_job(client, bases, worker, deadline)
                t_done = time.monotonic()
                swapped_at = wait_serving(client, bases, job["bundle_version"], deadline)
                time.sleep(args.after_seconds)  # keep querying the new version for a while
            finally:
                load.stop()
            after = [ready_version(client, base) for base in bases]

        return result_of(load.outcomes, job, job_s, before, after, [t - t_done for t in swapped_at])
    finally:
        for proc in reversed(procs):
            proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--rate", type=float, default=10.0, help="search requests per second (all APIs)")
    parser.add_argument("--after-seconds", type=float, default=3.0, help="keep querying after both swapped")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="hard stop for the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, bundles)")
    parser.add_argument("--out", type=Path, default=RESULTS / "scaleout.json")
    args = parser.parse_args(argv)
    args.redis_server = shutil.which("redis-server")
    if args.redis_server is None:
        print("redis-server not on PATH (apt-get install -y redis-server)", file=sys.stderr)
        return 2
    if not (args.data / "corpus.jsonl").exists():
        print(f"no dataset at {args.data}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="scaleout-"))
    try:
        result = run(args, work)
    except (RuntimeError, TimeoutError, subprocess.SubprocessError) as exc:
        print(f"FAILED: {exc}\nlogs kept in {work / 'logs'}", file=sys.stderr)
        return 1
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nrequests {result['requests']}, failed {result['failed']} (job {result['job_seconds']} s)")
    for api in result["apis"]:
        print(
            f"api{api['api']}: before {api['before']} -> after {api['after']} "
            f"(swap {api['swap_lag_after_job_s']} s after the job finished; answers {api['answers_per_version']})"
        )
    print(f"written: {args.out}")
    switched = all(a["before"] != a["after"] for a in result["apis"])
    return 0 if result["failed"] == 0 and switched else 1


if __name__ == "__main__":
    sys.exit(main())
