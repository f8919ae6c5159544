"""Seconds per training step by freeze_layers and cpu_bf16, the cells interleaved (one step of each per round)
so a shared machine's load falls on every cell alike.

    nice -n 10 python -m bench freeze_cost DATA [--rounds 4] [--freeze 0,2,4]

DATA: a BEIR folder (e.g. `python -m training demo-data --out DATA`). The step is the demo cell of
bench/results/freeze_layers_demo.json: 32 (query, positive) pairs of the train split, in-batch negatives,
64 tokens, no GradCache. Round 0 warms up and is not counted; the median of the rest is printed.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contract.config import TrainConfig
from contract.encoding.encoder import Encoder, document_text
from training.data.beir import load_beir
from training.train.device import precision_for
from training.train.freeze import freeze_lower_layers
from training.train.step import build_loss, build_optimizer, optimizer_step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--freeze", default="0,2,4", help="freeze_layers values, comma-separated")
    args = parser.parse_args(argv)
    data = load_beir(args.data, "train")
    config = TrainConfig(batch_size=32, max_seq_length=64, grad_cache=False, hard_negatives=0)
    pairs = [(q, d) for q, rel in data.qrels.items() for d in rel]
    rng = np.random.default_rng(0)
    batches = [
        [pairs[i] for i in rng.choice(len(pairs), config.batch_size, replace=False)]
        for _ in range(args.rounds)
    ]
    base = Encoder.load()
    cells = [(k, "off") for k in map(int, args.freeze.split(","))] + [(0, "on")]
    runs: list[tuple[int, str, Any, Any, torch.optim.Optimizer, list[float]]] = []
    for k, bf16 in cells:
        model = copy.deepcopy(base.model)
        freeze_lower_layers(model, k)
        model.max_seq_length = config.max_seq_length
        model.train()
        loss_fn = build_loss(config, base.dim)
        runs.append((k, bf16, model, loss_fn, build_optimizer(model, loss_fn, config), []))
    print(
        f"{config.batch_size} pairs, {config.max_seq_length} tokens, torch threads {torch.get_num_threads()}"
    )
    for batch in batches:
        queries = [data.queries[q] for q, _ in batch]
        docs = [document_text(data.corpus[d].title, data.corpus[d].text) for _, d in batch]
        for _k, bf16, model, loss_fn, optimizer, seconds in runs:
            start = time.perf_counter()
            optimizer_step(
                model,
                loss_fn,
                optimizer,
                [queries, docs, []],
                config,
                precision_for(torch.device("cpu"), bf16),
            )
            seconds.append(time.perf_counter() - start)
    first = statistics.median(runs[0][5][1:])
    for k, bf16, *_, seconds in runs:
        median = statistics.median(seconds[1:])
        print(
            f"freeze_layers={k} cpu_bf16={bf16}: {median:.2f} s/step ({median / first:.2f}x), steps {[round(s, 2) for s in seconds]}"
        )


if __name__ == "__main__":
    main()
