"""Fine-tune on scifact (qrels/train.tsv) and print base vs tuned test metrics and the wall time.

    flock "$HEAVY_LOCK" .venv/bin/python -m bench train_scifact OUT_DIR [key=value ...]

key=value pairs override TrainConfig fields (JSON values: epochs=2 symmetric=true lr=3e-5).
base_cache=FILE.pkl reuses (or creates) the base model's evaluation, so comparing several options does
not re-encode the corpus with the unchanged base model each time; leave it out to time a cold run.
Also prints the CPU used by other processes during the run, since this machine is shared.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import time
from pathlib import Path

from bench.harness.paths import require_scifact
from bench.harness.usage import asked_for_help
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from training.data.beir import load_beir
from training.eval.evaluate import evaluate
from training.train.examples import limit_queries
from training.train.run_hooks import RunHooks
from training.train.trainer import train


def busy_cpu_seconds() -> float:
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(argv[0])
    raw = dict(arg.split("=", 1) for arg in argv[1:])
    cache = Path(raw.pop("base_cache")) if "base_cache" in raw else None  # a path, not JSON
    overrides = {k: json.loads(v) for k, v in raw.items()}
    config = TrainConfig(**overrides)
    t0, busy0, own0 = time.perf_counter(), busy_cpu_seconds(), time.process_time()
    base_eval = None
    if cache is not None:
        if cache.exists():
            base_eval = pickle.loads(cache.read_bytes())
        else:
            data = limit_queries(load_beir(require_scifact(), config.eval_split), config)
            base_eval = evaluate(Encoder.load(config.base_model), data, show_progress=False)
            cache.write_bytes(pickle.dumps(base_eval))
    result = train(config, require_scifact(), out, hooks=RunHooks(show_progress=False), base_eval=base_eval)
    wall = time.perf_counter() - t0
    foreign = (busy_cpu_seconds() - busy0 - (time.process_time() - own0)) / wall
    print(f"options: {json.dumps(overrides)}")
    print(f"wall {wall:.0f}s, train {result.train_seconds:.0f}s, other processes used {foreign:.2f} cores")
    for name in ("ndcg@10", "recall@10", "mrr@10", "recall@100"):
        print(f"{name:>10}  base {result.base_metrics[name]:.4f}  tuned {result.tuned_metrics[name]:.4f}")


if __name__ == "__main__":
    main()
