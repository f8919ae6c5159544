"""The query-side retrain's loop: a query tower trained with InfoNCE against fixed document vectors.

Per step: a batch of (query, positive) pairs without repeated queries or positives
(training.train.negatives.no_duplicate_batches), the tower's query vectors (B, D), the positives' fixed
vectors (B, D) as in-batch negatives, and the batch's mined negatives (M, D) as extra negatives shared by
every row: `info_nce_loss` (van den Oord et al. 2018, arXiv 1807.03748; the project's
training/losses/info_nce.py) at the model's own τ. Only the query side has gradients, so a step costs a
forward and backward of B short queries: no document passes through a transformer.

Early stopping (Prechelt 1998, "Early stopping — but when?"): `validate()` (nDCG@10 of the validation
carve through the live index) runs every `eval_every` steps or at each epoch's end; the best tower's
weights are kept and restored, and training stops after `patience` checks without improvement.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from contract.query_config import QueryRetrainConfig
from training.distill.pairs import DistillPairs
from training.distill.query_tower import QueryTower
from training.losses.info_nce import info_nce_loss
from training.train.negatives import no_duplicate_batches
from training.train.phase_timer import PhaseTimer, StepMeter
from training.train.step import ProgressFn, embed, linear_schedule

logger = logging.getLogger(__name__)

PHASE = "query tower steps"


@dataclass
class FixedDocs:
    """The document vectors the loop needs, read once from the index: rows of `vectors` by position."""

    vectors: torch.Tensor  # (m, D) float32, fixed
    row: dict[int, int]  # corpus position -> row of `vectors`

    def of(self, positions: list[int]) -> torch.Tensor:
        return self.vectors[[self.row[p] for p in positions]]  # (len, D)


@dataclass
class TowerTargets:
    """What the query tower learns from: the pairs, the fixed document vectors they point at and each
    pair's negatives mined from the live index (corpus positions)."""

    pairs: DistillPairs
    docs: FixedDocs
    negatives: list[list[int]]


@dataclass
class LoopControl:
    """How the loop is steered from outside: its seed, a step cap (the retrain's max_steps), the
    validation check early stopping reads, and the progress and phase-time sinks of a job or a CLI."""

    seed: int
    max_steps: int | None = None
    validate: Callable[[], float] | None = None
    on_progress: ProgressFn | None = None
    timer: PhaseTimer | None = None


@dataclass
class LoopResult:
    steps: int
    seconds: float
    best_step: int
    best_validation: float | None
    curve: list[dict[str, float]] = field(default_factory=list)  # validation checks
    log: list[dict[str, Any]] = field(default_factory=list)  # per step: loss, n_negatives (gap report's k)
    stopped_early: bool = False


def fit_query_tower(
    tower: QueryTower,
    targets: TowerTargets,
    *,
    temperature: float,
    config: QueryRetrainConfig,
    control: LoopControl,
) -> LoopResult:
    """Train the tower's `params` in place; returns the loop's record. The model ends at its best check."""
    model, pairs = tower.model, targets.pairs
    rng = np.random.default_rng(control.seed)
    torch.manual_seed(control.seed)
    epochs = [
        no_duplicate_batches(pairs.keys, pairs.positives, config.query_batch_size, rng, positives=pairs.known)
        for _ in range(config.query_epochs)
    ]
    total = _total_steps(epochs, control)
    saved_len = model.max_seq_length
    model.max_seq_length = min(config.query_max_seq_length, saved_len or config.query_max_seq_length)
    stopper = _Stopper(_at_length(model, saved_len, control.validate), config.query_patience, tower.params)
    stopper.check(0)  # the live query tower's own score: a retrain that never beats it changes nothing
    meter = StepMeter(PHASE, total, control.timer)
    started = time.perf_counter()
    log = _train_epochs(tower, targets, epochs, stopper, meter, temperature, config, control)
    step = len(log)
    model.eval()
    if step and (not stopper.curve or stopper.curve[-1]["step"] != step):
        stopper.check(step)  # the last step's score, when the schedule ended between checks
    stopper.restore()
    meter.close()
    model.max_seq_length = saved_len
    seconds = time.perf_counter() - started
    if control.timer is not None:
        control.timer.add(PHASE, seconds)
    logger.info(
        "query tower: %d steps in %.0f s (%.2f steps/s), best validation nDCG@10 %s at step %d%s",
        step, seconds, step / max(seconds, 1e-9), stopper.best, stopper.best_step,
        " (stopped early)" if stopper.stop else "",
    )  # fmt: skip
    return LoopResult(
        step, round(seconds, 2), stopper.best_step, stopper.best, stopper.curve, log, stopper.stop
    )


def _train_epochs(
    tower: QueryTower,
    targets: TowerTargets,
    epochs: list[list[list[int]]],
    stopper: _Stopper,
    meter: StepMeter,
    temperature: float,
    config: QueryRetrainConfig,
    control: LoopControl,
) -> list[dict[str, Any]]:
    """The steps, with validation checks for early stopping; returns the per-step log."""
    model, total = tower.model, _total_steps(epochs, control)
    optimizer = torch.optim.AdamW(tower.params, lr=config.query_lr, weight_decay=0.01)
    warmup = max(1, total // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: linear_schedule(s, warmup, total))
    started, log = time.perf_counter(), list[dict[str, Any]]()
    model.train()
    for epoch, batches in enumerate(epochs):
        for batch in batches:
            if len(log) >= total or stopper.stop:
                break
            loss, n_extra = tower_step(tower, optimizer, targets, batch, temperature, config.query_symmetric)
            scheduler.step()
            meter.step()
            log.append(
                {"step": len(log) + 1, "epoch": epoch, "loss": loss, "n_negatives": len(batch) - 1 + n_extra,
                 "temperature": temperature}
            )  # fmt: skip
            _progress(control.on_progress, log[-1], time.perf_counter() - started, total)
            if config.query_eval_every and len(log) % config.query_eval_every == 0:
                _check(model, stopper, len(log))
        if stopper.stop or len(log) >= total:
            break
        if not config.query_eval_every:
            _check(model, stopper, len(log))
    return log


def _total_steps(epochs: list[list[list[int]]], control: LoopControl) -> int:
    total = sum(len(b) for b in epochs)
    return total if control.max_steps is None else min(total, control.max_steps)


def _check(model: Any, stopper: _Stopper, step: int) -> None:
    """A validation check in eval mode, then back to training."""
    model.eval()
    stopper.check(step)
    model.train()


def tower_step(
    tower: QueryTower,
    optimizer: torch.optim.Optimizer,
    targets: TowerTargets,
    batch: list[int],
    temperature: float,
    symmetric: bool = False,
) -> tuple[float, int]:
    """One optimiser step; returns (loss, extra negatives the batch's rows saw)."""
    pairs, docs, negatives = targets.pairs, targets.docs, targets.negatives
    positives = [pairs.positives[i] for i in batch]
    # every row sees every extra negative: none may be a known positive of any query in the batch
    forbidden = set(positives).union(*(pairs.known.get(pairs.keys[i], set()) for i in batch))
    extra_pos = sorted({j for i in batch for j in negatives[i]} - forbidden)
    q = embed(tower.model, [pairs.texts[i] for i in batch])  # (B, D), the only side with gradients
    d = docs.of(positives)  # (B, D) fixed
    extra = docs.of(extra_pos) if extra_pos else None  # (M, D) fixed
    loss = info_nce_loss(q, d, temperature=temperature, extra_docs=extra, symmetric=symmetric)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(tower.params, 1.0)
    optimizer.step()
    return float(loss.detach()), len(extra_pos)


def _at_length(
    model: Any, length: int | None, validate: Callable[[], float] | None
) -> Callable[[], float] | None:
    """`validate` run with the model at `length` tokens (the serving limit), the training limit restored."""
    if validate is None:
        return None

    def check() -> float:
        training_len = model.max_seq_length
        model.max_seq_length = length
        try:
            return validate()
        finally:
            model.max_seq_length = training_len

    return check


def _progress(on_progress: ProgressFn | None, record: dict[str, Any], elapsed: float, total: int) -> None:
    if on_progress is None:
        return
    step = record["step"]
    on_progress(
        {"step": step, "total_steps": total, "epoch": record["epoch"], "loss": record["loss"],
         "temperature": record["temperature"], "eta_s": elapsed / step * (total - step)}
    )  # fmt: skip


class _Stopper:
    """Validation checks, the best weights seen and the patience rule."""

    def __init__(
        self, validate: Callable[[], float] | None, patience: int, params: list[torch.nn.Parameter]
    ) -> None:
        self.validate, self.patience, self.params = validate, patience, params
        self.best: float | None = None
        self.best_step = 0
        self.best_state: list[torch.Tensor] | None = None
        self.bad = 0
        self.stop = False
        self.curve: list[dict[str, float]] = []

    def check(self, step: int) -> None:
        if self.validate is None:
            return
        score = float(self.validate())  # the caller encodes with the tower's serving token limit
        self.curve.append({"step": step, "ndcg@10": round(score, 6)})
        logger.info("query tower validation nDCG@10 at step %d: %.4f", step, score)
        if self.best is None or score > self.best:
            self.best, self.best_step, self.bad = score, step, 0
            self.best_state = [copy.deepcopy(p.detach()) for p in self.params]
            return
        self.bad += 1
        self.stop = self.bad >= self.patience

    def restore(self) -> None:
        """Put the best check's weights back (no-op without validation)."""
        if self.best_state is None:
            return
        with torch.no_grad():
            for p, best in zip(self.params, self.best_state, strict=True):
                p.copy_(best)
