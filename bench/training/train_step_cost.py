"""What a training step costs: seconds, and the peak resident memory of a process that only trains.

    flock BENCH_LOCK nice -n 10 .venv/bin/python -m bench train_step_cost [--steps 3] [--data DIR] [--cells a,b]

One subprocess per cell (so each peak RSS is that cell's alone: ru_maxrss of a fresh process that loads the
model and runs the steps). Cells of the full fine-tune (training/train/step.py's `optimizer_step`, the
trainer's step) vary one knob of the default recipe at a time: mined negatives per pair (0, 1, 3), the
document token limit (64, 128, 256) against the query limit (queries are ~20 tokens, so a query limit
does not change a step), and GradCache (training/train/grad_cache.py, the default since it holds a step
under 2 GB) with mini-batches of 16 or 32 or off.
Query-side cells time training/distill/query_loop.py's step: the LoRA and the all-weights query tower
against fixed document vectors. Batches are scifact training pairs (../shared/data/scifact, or --data);
negatives are random corpus documents (a step's cost depends on their lengths, not on how hard they are).
Each cell: one warm-up step, then the median of `--steps` timed steps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.paths import REPO, SCIFACT

# name -> overrides of the default TrainConfig (full cells) or of QueryRetrainConfig (query cells)
CELLS: dict[str, dict[str, Any]] = {
    "default": {},  # GradCache with 16 texts at a time, 3 mined negatives a pair, 128 tokens
    "no gradcache": {"grad_cache": False},
    "0 neg": {"hard_negatives": 0},
    "1 neg": {"hard_negatives": 1},
    "doc 64 tok": {"max_seq_length": 64},
    "doc 256 tok": {"max_seq_length": 256},
    "no gradcache 1 neg": {"grad_cache": False, "hard_negatives": 1},
    "no gradcache doc 64 tok": {"grad_cache": False, "max_seq_length": 64},
    "gradcache 32": {"mini_batch_size": 32},
    # scripts/demo.sh's recipe: one epoch, in-batch negatives only, 64 tokens
    "demo recipe": {"hard_negatives": 0, "max_seq_length": 64},
    "demo recipe no gradcache": {"hard_negatives": 0, "max_seq_length": 64, "grad_cache": False},
    "query tower lora": {"query": {"query_tower": "lora"}},
    "query tower full": {"query": {"query_tower": "full"}},
}


def run_cell(name: str, data: Path, steps: int) -> dict[str, Any]:
    """The cell in this process (called in a fresh subprocess): per-step seconds and peak RSS."""
    import numpy as np

    from contract.config import TrainConfig
    from contract.encoding.encoder import document_text
    from training.data.beir import load_beir
    from training.data.retrieval_data import training_pairs
    from training.train.trainer import seed_everything

    overrides = dict(CELLS[name])
    seed_everything(0)
    split = load_beir(data, "train")
    pairs = training_pairs(split)
    docs = [document_text(d.title, d.text) for d in split.corpus.values()]
    rng = np.random.default_rng(0)
    query = overrides.pop("query", None)
    config = TrainConfig(**overrides)
    if query is None:
        times = full_step_times(config, pairs, docs, rng, steps)
    else:
        times = query_step_times(query, pairs, rng, steps)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"cell": name, "step_s": statistics.median(times[1:]), "steps": times[1:], "peak_rss_mb": peak_mb}


def full_step_times(config: Any, pairs: list, docs: list[str], rng: Any, steps: int) -> list[float]:
    """Seconds of steps + 1 steps of the full fine-tune (the first is a warm-up)."""
    from contract.encoding.encoder import Encoder
    from training.train.step import build_loss, build_optimizer, optimizer_step

    times: list[float] = []
    encoder = Encoder.load()
    model = encoder.model
    model.max_seq_length = config.max_seq_length
    loss_fn = build_loss(config, encoder.dim)
    optimizer = build_optimizer(model, loss_fn, config)
    model.train()
    for _ in range(steps + 1):
        batch = [pairs[int(i)] for i in rng.choice(len(pairs), config.batch_size, replace=False)]
        n_neg = config.batch_size * config.hard_negatives
        negs = [docs[int(i)] for i in rng.choice(len(docs), n_neg, replace=False)] if n_neg else []
        groups = [[p.query for p in batch], [p.positive for p in batch], negs]
        started = time.perf_counter()
        optimizer_step(model, loss_fn, optimizer, groups, config)
        times.append(time.perf_counter() - started)
    return times


def query_step_times(query: dict[str, Any], pairs: list, rng: Any, steps: int) -> list[float]:
    """Seconds of steps + 1 steps of the query-side retrain's tower, on fixed random document vectors."""
    import torch

    from contract.encoding.encoder import default_model_path
    from contract.query_config import QueryRetrainConfig
    from training.distill.pairs import DistillPairs
    from training.distill.query_loop import FixedDocs, TowerTargets, tower_step
    from training.distill.query_tower import query_tower

    times: list[float] = []
    qconfig = QueryRetrainConfig(**query)
    tower = query_tower(default_model_path(), qconfig)
    tower.model.max_seq_length = qconfig.query_max_seq_length
    n = qconfig.query_batch_size
    vectors = torch.nn.functional.normalize(torch.randn(n * (1 + qconfig.query_hard_negatives), 384), dim=-1)
    fixed = FixedDocs(vectors, {i: i for i in range(len(vectors))})
    optimizer = torch.optim.AdamW(tower.params, lr=qconfig.query_lr)
    tower.model.train()
    for _ in range(steps + 1):
        batch = [pairs[int(i)] for i in rng.choice(len(pairs), n, replace=False)]
        texts = [p.query for p in batch]
        dp = DistillPairs(texts, list(range(n)), [f"q{i}" for i in range(n)], {})
        negatives = [
            [n + i * qconfig.query_hard_negatives + j for j in range(qconfig.query_hard_negatives)]
            for i in range(n)
        ]
        started = time.perf_counter()
        tower_step(tower, optimizer, TowerTargets(dp, fixed, negatives), list(range(n)), 0.05)
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--cells", default=",".join(CELLS), help="comma-separated cell names")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # the subprocess's own cell
    args = parser.parse_args(argv)
    if args.cell:
        print(json.dumps(run_cell(args.cell, args.data, args.steps)))
        return
    rows = []
    for name in [c.strip() for c in args.cells.split(",") if c.strip()]:
        done = subprocess.run(
            [sys.executable, __file__, "--cell", name, "--steps", str(args.steps), "--data", str(args.data)],
            capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['cell']:<26} {row['step_s']:7.2f} s/step  peak RSS {row['peak_rss_mb']:7.0f} MiB  "
              f"(steps {', '.join(f'{s:.2f}' for s in row['steps'])})", flush=True)  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
