"""The training loop under a time budget: the deadline (training/train/budget.py) and the best checkpoint
(training/train/checkpoints.py) steering training/train/trainer.py's `fit`.

Before the first step it times the corpus encode's rate and fixes training's share of the budget (or fails:
BudgetTooSmall). After every step it re-fits the schedule's total to what the time left holds at the rate
measured so far (a step's seconds plus its share of the evaluations; the learning rate then still decays to
zero where training will actually end), validates when due, and before each step it checks the step and a
last evaluation still fit. At the end it validates the last step if that was not done, restores the best
state and writes down the budget, the estimate, the steps run, the checkpoint chosen and why.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from contract.config import TrainConfig
from training.eval.encode_rate import docs_per_s
from training.train.budget import Deadline, estimate
from training.train.checkpoints import EVALUATIONS, BestCheckpoint, validation_pool
from training.train.phases import Run
from training.train.run_hooks import RunHooks

logger = logging.getLogger(__name__)


class BudgetedTraining:
    def __init__(self, deadline: Deadline, checkpoints: BestCheckpoint | None, planned: int):
        self.deadline, self.checkpoints, self.planned = deadline, checkpoints, planned
        self.total = planned
        self.steps = 0
        self._eval_total_s = 0.0

    @classmethod
    def start(cls, run: Run, config: TrainConfig, hooks: RunHooks, planned: int) -> BudgetedTraining | None:
        """None without a budget; else the deadline measured now (BudgetTooSmall when nothing fits)."""
        if config.time_budget_s is None:
            return None
        rate = docs_per_s(run.encoder, run.eval_data, config.seed)  # the base model, evaluation length
        expected = estimate(
            len(run.eval_data.corpus), rate, "probe (torch, base model)",
            publishes=hooks.publishes, distills=hooks.distills,
        )  # fmt: skip
        deadline = Deadline(config.time_budget_s, run.started, expected)
        pool = validation_pool(run.val_data, config.seed) if run.val_data is not None else None
        every = max(1, math.ceil(planned / EVALUATIONS))
        checkpoints = BestCheckpoint(pool, every, run.eval_seq_length) if pool is not None else None
        logger.info(
            "time budget %.0fs: %.0fs spent, ~%.0fs reserved for the corpus encode and publication, %.0fs to train",
            deadline.budget_s, deadline.spent_before_s, expected.reserve_s, deadline.train_s,
        )  # fmt: skip
        return cls(deadline, checkpoints, planned)

    def _per_step_s(self) -> float:
        trained = time.perf_counter() - self.deadline.train_started - self._eval_total_s
        return trained / self.steps if self.steps else 0.0

    def _last_eval_s(self) -> float:
        return self.checkpoints.eval_s if self.checkpoints is not None else 0.0

    def room_for_step(self) -> bool:
        """Does one more step (and a last evaluation after it) fit in training's share?"""
        return self.deadline.room_for(self._per_step_s() + self._last_eval_s())

    def after_step(self, step: int, model: Any, loss_fn: Any, elapsed_s: float) -> int:
        """Validate when due; the schedule's total re-fitted to the time left."""
        self.steps = step
        if self.checkpoints is not None and self.checkpoints.due(step, self.total):
            self._evaluate(step, model, loss_fn, elapsed_s)
        evals = self._last_eval_s() / self.checkpoints.every if self.checkpoints is not None else 0.0
        self.total = self.deadline.steps_that_fit(step, self.planned, self._per_step_s() + evals)
        if self.checkpoints is not None:
            self.checkpoints.every = max(1, math.ceil(self.total / EVALUATIONS))
        return self.total

    def _evaluate(self, step: int, model: Any, loss_fn: Any, elapsed_s: float) -> None:
        assert self.checkpoints is not None
        self.checkpoints.evaluate(step, model, loss_fn, elapsed_s)
        self._eval_total_s += self.checkpoints.eval_s

    def finish(self, model: Any, loss_fn: Any, elapsed_s: float) -> dict[str, Any]:
        """Validate the last step if due, restore the best state; the run's budget record."""
        chosen: dict[str, Any] = {"step": self.steps, "why": "no validation carve to choose on"}
        if self.checkpoints is not None and self.steps > 0:
            done = [e["step"] for e in self.checkpoints.evaluations]
            if self.steps not in done:
                self._evaluate(self.steps, model, loss_fn, elapsed_s)
            chosen = self.checkpoints.restore(model, loss_fn, self.steps)
        stopped = "the time budget" if self.steps < self.planned else "the recipe's planned steps"
        record = {
            **self.deadline.record(),
            "planned_steps": self.planned,
            "steps_run": self.steps,
            "stopped_by": stopped,
            "validation": self.checkpoints.record() if self.checkpoints is not None else None,
            "chosen_checkpoint": chosen,
            "evaluation_s": round(self._eval_total_s, 2),
        }
        logger.info(
            "time budget: %d of %d planned steps (stopped by %s); checkpoint of step %s (%s)",
            self.steps, self.planned, stopped, chosen["step"], chosen["why"],
        )  # fmt: skip
        return record
