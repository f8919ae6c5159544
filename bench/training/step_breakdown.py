"""Where one training step's time goes: tokenisation, forward per layer, backward, GradCache's extra forward,
the optimiser, and the share of padded tokens.

    nice -n 10 .venv/bin/python -m bench step_breakdown [--data DIR] [--cell default] [--steps 3]

The full fine-tune's step as the trainer runs it (training/train/step.py `optimizer_step`, GradCache
included when the recipe has it), with timers around its parts rather than a copy of it: the tokenizer
(`model.preprocess`, which also gives each batch's attention mask, hence the padded share), a pre- and
post-hook on the embeddings, each transformer layer and the pooling (split into forwards with a graph and
the no-graph forward GradCache adds), every `Tensor.backward`, and `optimizer.step`. `other` is what is
left of the step (the loss, gradient clipping, Python). Cells are bench/training/train_step_cost.py's (one
knob of the default recipe changed; --length-buckets overrides the cell's); batches are the trainer's
no-duplicate batches of --data's training pairs (by length with --length-buckets), random corpus documents
as the mined negatives (a step's cost depends on their lengths, not on how hard they are). Prints the
median over --steps timed steps (after a warm-up) of each part, in seconds and as a share of the step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.harness.paths import SCIFACT
from bench.training.train_step_cost import CELLS


class StepTimers:
    """Seconds per part of the current step, filled by the hooks and wrappers `instrument` installs."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)
        self.tokens = 0
        self.padded = 0
        self._open: dict[int, float] = {}

    def pre(self, module: Any, *_: Any) -> None:
        self._open[id(module)] = time.perf_counter()

    def post(self, name: str, module: Any, *_: Any) -> None:
        import torch

        kind = "forward" if torch.is_grad_enabled() else "forward, no graph (GradCache)"
        self.parts[f"{kind}: {name}"] += time.perf_counter() - self._open.pop(id(module))

    def timed(self, part: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.parts[part] += time.perf_counter() - started

        return wrapper


def instrument(model: Any, optimizer: Any, timers: StepTimers) -> None:
    """Hooks on the transformer's parts, wrappers on the tokenizer, backward and the optimiser."""
    from functools import partial

    import torch

    transformer = model[0].auto_model
    named = [("embeddings", transformer.embeddings)]
    named += [(f"layer {i}", layer) for i, layer in enumerate(transformer.encoder.layer)]
    named += [("pooling", model[1])]
    for name, module in named:
        module.register_forward_pre_hook(timers.pre)
        module.register_forward_hook(partial(timers.post, name))
    preprocess = model.preprocess

    def tokenise(texts: list[str]) -> Any:
        started = time.perf_counter()
        features = preprocess(texts)
        timers.parts["tokenise"] += time.perf_counter() - started
        mask = features["attention_mask"]
        timers.tokens += int(mask.numel())
        timers.padded += int(mask.numel() - mask.sum())
        return features

    model.preprocess = tokenise
    torch.Tensor.backward = timers.timed("backward", torch.Tensor.backward)
    optimizer.step = timers.timed("optimizer", optimizer.step)


def run(data: Path, cell: str, steps: int) -> tuple[list[dict[str, float]], float]:
    """Per timed step, {part: seconds} (with `step` the whole); and the padded share of all tokens."""
    import numpy as np

    from contract.config import TrainConfig
    from contract.encoding.encoder import Encoder, document_text
    from training.data.beir import load_beir
    from training.data.retrieval_data import training_pairs
    from training.train.negatives import no_duplicate_batches
    from training.train.step import build_loss, build_optimizer, optimizer_step
    from training.train.trainer import seed_everything

    seed_everything(0)
    split = load_beir(data, "train")
    pairs, docs = training_pairs(split), [document_text(d.title, d.text) for d in split.corpus.values()]
    config = TrainConfig(**CELLS[cell])
    encoder = Encoder.load()
    model = encoder.model
    model.max_seq_length = config.max_seq_length
    loss_fn = build_loss(config, encoder.dim)
    optimizer = build_optimizer(model, loss_fn, config)
    timers = StepTimers()
    instrument(model, optimizer, timers)
    model.train()
    rng, rows = np.random.default_rng(0), []
    drawn = no_duplicate_batches(
        [p.query_id for p in pairs],
        [p.positive_id for p in pairs],
        config.batch_size,
        rng,
        lengths=[len(p.positive) for p in pairs],
        buckets=config.length_buckets,
    )  # the trainer's batches (training/train/step.py plan_steps), one epoch's worth, in its order
    for i in range(steps + 1):
        batch = [pairs[j] for j in drawn[i % len(drawn)]]
        n_neg = config.batch_size * config.hard_negatives
        negs = [docs[int(j)] for j in rng.choice(len(docs), n_neg, replace=False)] if n_neg else []
        timers.parts.clear()
        started = time.perf_counter()
        optimizer_step(
            model, loss_fn, optimizer, [[p.query for p in batch], [p.positive for p in batch], negs], config
        )
        if i:  # the first step is a warm-up
            rows.append(dict(timers.parts) | {"step": time.perf_counter() - started})
    return rows, timers.padded / max(1, timers.tokens)


def main(argv: list[str] | None = None) -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--cell", default="default", choices=[c for c in CELLS if "query" not in c])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--length-buckets", type=int, default=None, help="override the cell's length_buckets")
    args = parser.parse_args(argv)
    if args.length_buckets is not None:
        CELLS[args.cell] = CELLS[args.cell] | {"length_buckets": args.length_buckets}
    rows, padded = run(args.data, args.cell, args.steps)
    step = statistics.median(r["step"] for r in rows)
    print(f"cell {args.cell!r} ({CELLS[args.cell]}) on {args.data.name}: {step:.2f} s/step (median of {len(rows)}), "
          f"padded tokens {padded:.1%} of all tokenised")  # fmt: skip
    parts = sorted({k for r in rows for k in r if k != "step"}, key=_order)
    for part in parts:
        s = statistics.median(r.get(part, 0.0) for r in rows)
        print(f"  {part:44s} {s:7.3f} s  {s / step:6.1%}")
    # the parts do not nest (tokenising precedes the modules' forwards; backward and the optimiser follow)
    other = step - sum(statistics.median(r.get(p, 0.0) for r in rows) for p in parts)
    print(f"  {'other (loss, clipping, Python)':44s} {other:7.3f} s  {other / step:6.1%}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def _order(part: str) -> tuple[int, str]:
    rank = {"tokenise": 0, "backward": 8, "optimizer": 9}
    if part.startswith("forward, no graph"):
        return 2, _layer_key(part)
    if part.startswith("forward"):
        return 1, _layer_key(part)
    return rank.get(part, 7), part


def _layer_key(part: str) -> str:
    name = part.split(": ", 1)[1]
    if name == "embeddings":
        return "0"
    if name == "pooling":
        return "9"
    return f"1{int(name.split()[1]):02d}"
