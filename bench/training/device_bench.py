"""Training steps per second on each device torch sees (cpu, and cuda when present).

    flock BENCH_LOCK .venv/bin/python -m bench device_bench [steps=8] [batch_size=32] [max_seq_length=128]

Batches are (summary, docstring body) pairs of the demo dataset (training/data/demo_data.py), with one extra
random corpus negative per pair, so a step embeds 3 × batch_size texts as the default fine-tune does.
Each device runs the trainer's own `optimizer_step` (cuda under its autocast precision) after 2 warm-up steps;
the median of three timed runs is printed.
"""

from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

from bench.harness.usage import asked_for_help
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from training.data.beir import load_beir
from training.data.demo_data import build_demo_dataset
from training.data.retrieval_data import training_pairs
from training.train.device import precision_for
from training.train.step import build_loss, build_optimizer, optimizer_step
from training.train.trainer import seed_everything


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    args = dict(a.split("=", 1) for a in argv)
    steps = int(args.pop("steps", 8))
    config = TrainConfig(**{k: int(v) for k, v in args.items()})
    with tempfile.TemporaryDirectory() as tmp:
        data = load_beir(build_demo_dataset(f"{tmp}/pydocs", n_docs=600, n_test=100), "train")
    pairs = training_pairs(data)
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(steps + 2):
        rows = rng.choice(len(pairs), size=config.batch_size, replace=False)
        negatives = rng.choice(len(pairs), size=config.batch_size, replace=False)
        batches.append(
            [
                [pairs[i].query for i in rows],
                [pairs[i].positive for i in rows],
                [pairs[i].positive for i in negatives],
            ]
        )
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    base = Encoder.load()
    print(
        f"batch {config.batch_size} pairs + {config.batch_size} negatives, {config.max_seq_length} tokens, torch threads {torch.get_num_threads()}"
    )
    for name in devices:
        device = torch.device(name)
        precision = precision_for(device, config.cpu_bf16)
        seed_everything(0)
        model = copy.deepcopy(base.model).to(device)
        model.max_seq_length = config.max_seq_length
        model.train()
        loss_fn = build_loss(config, base.dim).to(device)
        optimizer = build_optimizer(model, loss_fn, config)
        for groups in batches[:2]:  # warm-up: allocator, kernels, autotuning
            optimizer_step(model, loss_fn, optimizer, groups, config, precision)
        runs = []
        for _ in range(3):
            if name == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for groups in batches[2:]:
                optimizer_step(model, loss_fn, optimizer, groups, config, precision)
            if name == "cuda":
                torch.cuda.synchronize()
            runs.append(steps / (time.perf_counter() - start))
        print(
            f"{name:>5} ({precision.name}): {statistics.median(runs):.2f} steps/s (runs {', '.join(f'{r:.2f}' for r in runs)})"
        )
    if "cuda" not in devices:
        print("cuda: not measured (torch.cuda.is_available() is False on this machine)")


if __name__ == "__main__":
    main()
