"""Search for the default fine-tuning recipe on scifact, selecting on a validation split only.

    nice -n 5 .venv/bin/python -m bench recipe_search WORK_DIR NAME [key=value ...] [--data DIR --results F]
    (two at once on a shared 2-core machine: OMP_NUM_THREADS=1 each)

Trains one configuration (TrainConfig defaults + key=value overrides, JSON values) on scifact's (or
--data's: e.g. the demo corpus, `python -m training demo-data`, with --results recipe_search_demo.json)
qrels/train.tsv minus the seeded validation share (TrainConfig.validation_fraction, training.data.validation_carve),
and appends its validation nDCG@10 (base and tuned, same held-out queries) to
bench/results/recipe_search.json. The test split is never read: the run evaluates on the train split
(eval_split=train), whose corpus encoding also serves the validation metrics. Report the test numbers once,
for the chosen default, with bench/training/train_scifact.py.

WORK_DIR keeps the base model's evaluation (pickle) and the corpus embedding cache between runs, so each
configuration costs its training steps plus one corpus encoding by its tuned model.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import time
from pathlib import Path

import torch

from bench.harness.paths import RESULTS as RESULTS_DIR
from bench.harness.paths import SCIFACT
from contract.atomic import write_json_atomic
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from training.data.beir import load_beir
from training.eval.embedding_cache import EmbeddingCache
from training.eval.evaluate import evaluate
from training.train.phase_timer import PhaseTimer
from training.train.run_hooks import RunHooks
from training.train.trainer import train

RESULTS = RESULTS_DIR / "recipe_search.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("name")
    parser.add_argument("overrides", nargs="*", help="TrainConfig key=value (JSON values)")
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSON list the run's row joins")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    work, name, data, results_file = args.work, args.name, args.data, args.results
    overrides = {k: json.loads(v) for k, v in (arg.split("=", 1) for arg in args.overrides)}
    config = TrainConfig(**{"eval_split": "train", "report": False, **overrides})
    if config.eval_split == "test":
        raise SystemExit("recipe_search selects on validation only: eval_split=test is refused")
    work.mkdir(parents=True, exist_ok=True)
    cache = EmbeddingCache(work / "embeddings")
    # per dataset: --data made one WORK_DIR able to hold runs of two corpora
    base_pickle = work / f"base_eval_{data.name}_{config.eval_split}.pkl"
    if base_pickle.exists():
        base_eval = pickle.loads(base_pickle.read_bytes())
    else:
        base_eval = evaluate(Encoder.load(config.base_model), load_beir(data, config.eval_split), cache=cache)
        base_pickle.write_bytes(pickle.dumps(base_eval))
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    timer = PhaseTimer()
    result = train(
        config,
        data,
        work / "runs" / name,
        hooks=RunHooks(show_progress=False, cache=cache, timer=timer),
        base_eval=base_eval,
    )
    wall = time.perf_counter() - t0
    if result.validation_metrics is None:
        raise SystemExit("no validation metrics: validation_fraction must be > 0")
    val = result.validation_metrics
    row = {
        "name": name,
        "options": overrides,
        "validation_fraction": config.validation_fraction,
        "n_validation_queries": val["tuned"]["n_queries"],
        "validation": {side: {k: round(float(v), 4) for k, v in m.items()} for side, m in val.items()},
        "train_seconds": round(result.train_seconds, 1),
        "wall_seconds": round(wall, 1),
        "phase_seconds": {phase: round(sec, 1) for phase, sec in timer.seconds.items()},
        "train_steps": timer.steps.get("train steps"),
        "peak_rss_mb": timer.to_json()["peak_rss_mb"],  # the process so far: base evaluation included
        # OMP_NUM_THREADS=1 for two runs side by side: two OpenMP threads per process stall on a shared,
        # loaded 2-core machine (tests/training/gap/test_gap_report.py pins 1 thread for the same reason)
        "torch_threads": torch.get_num_threads(),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
    }
    rows = json.loads(results_file.read_text()) if results_file.exists() else []
    rows = [r for r in rows if r["name"] != name] + [row]
    results_file.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(results_file, rows, newline=True)
    print(f"{name}: options {json.dumps(overrides)}")
    print(
        f"validation nDCG@10 base {val['base']['ndcg@10']:.4f} tuned {val['tuned']['ndcg@10']:.4f} "
        f"({row['n_validation_queries']} queries); wall {wall:.0f}s, train {result.train_seconds:.0f}s, "
        f"load {load_before:.1f} -> {row['load_average_after']:.1f}"
    )


if __name__ == "__main__":
    main()
