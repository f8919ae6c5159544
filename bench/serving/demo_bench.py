"""The demo end to end: build the stdlib-docstring dataset, run the pipeline, start the API, time it all.

    flock BENCH_LOCK .venv/bin/python -m bench demo_bench OUT_DIR [docs=N] [key=value ...]

Prints the phase table of the pipeline, the time until `POST /search` answers (docs/benchmarks.md's "make demo
to a serving API", install excluded), base vs tuned nDCG@10 on the demo's test split with a paired
bootstrap 95% CI of the difference (queries resampled), and the CPU other processes used meanwhile
(this machine is shared). key=value pairs override TrainConfig fields (JSON values: epochs=1).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from bench.harness.paths import REPO
from bench.harness.ports import free_port
from bench.harness.usage import asked_for_help
from contract.config import TrainConfig
from contract.jobs.plan import DataPlan, PublicationPlan, PublishPlan, retrain_plan
from contract.query_config import QueryRetrainConfig
from training.data.demo_data import DEFAULT_DOCS, build_demo_dataset
from training.publish.pipeline import run_pipeline
from training.train.run_hooks import RunHooks


def busy_cpu_seconds() -> float:
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def paired_bootstrap(
    base: np.ndarray, tuned: np.ndarray, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile CI of mean(tuned − base) over resampled queries."""
    diff = tuned - base  # (n_queries,)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)  # (n_boot,)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def serve_until_search_answers(bundles: Path, timeout_s: float = 300.0) -> float:
    """Start uvicorn on the bundles folder; seconds until POST /search returns 200."""
    port = free_port()
    env = {**os.environ, "SEARCH_BUNDLES_DIR": str(bundles), "SEARCH_RELOAD_POLL_SECONDS": "0"}
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - t0 < timeout_s:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/search",
                    json={"query": "Return the number of items in the queue.", "top_k": 3},
                    timeout=5.0,
                )
                if r.status_code == 200:
                    return time.perf_counter() - t0
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError("the API did not answer /search")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    logging.basicConfig(level=logging.WARNING)
    out = Path(argv[0])
    raw = dict(arg.split("=", 1) for arg in argv[1:])
    n_docs = int(raw.pop("docs", DEFAULT_DOCS))
    config = TrainConfig(**{k: json.loads(v) for k, v in raw.items()})
    t0, busy0, own0 = time.perf_counter(), busy_cpu_seconds(), time.process_time()
    data = build_demo_dataset(out / "data" / "pydocs", n_docs=n_docs)
    built = time.perf_counter() - t0
    result = run_pipeline(
        retrain_plan(
            config,
            QueryRetrainConfig(),
            PublishPlan(
                data=DataPlan(data_dir=str(data)),
                publication=PublicationPlan(bundles_dir=str(out / "bundles"), distill=False),
            ),
            "full",
        ),
        out / "runs",
        RunHooks(show_progress=False),
    )
    serve = serve_until_search_answers(out / "bundles")
    wall = time.perf_counter() - t0
    foreign = (busy_cpu_seconds() - busy0 - (time.process_time() - own0)) / wall
    base, tuned = result.train.base_evaluation, result.train.evaluation
    assert base is not None and tuned is not None
    low, high = paired_bootstrap(base.per_query_ndcg, tuned.per_query_ndcg)

    print(f"demo dataset: {n_docs} documents; options {json.dumps(raw)}")
    print(f"build dataset {built:.1f}s")
    print(result.timer.table())
    print(f"API start until /search answers {serve:.1f}s")
    print(
        f"make demo (after install) to a serving API: {wall:.0f}s wall; other processes used {foreign:.2f} cores"
    )
    b, t = base.metrics["ndcg@10"], tuned.metrics["ndcg@10"]
    print(
        f"nDCG@10 base {b:.4f} tuned {t:.4f} change {t - b:+.4f}, paired bootstrap 95% CI [{low:+.4f}, {high:+.4f}]"
    )
    print(f"bundle {result.publish.version} live={result.publish.live} ({result.publish.reason})")


if __name__ == "__main__":
    main()
