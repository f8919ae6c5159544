"""A wall-clock budget for a whole run (`TrainConfig.time_budget_s`, `--time-budget`): what the corpus encode
and the publication will cost is estimated before the first step, training gets the rest, and the run stops
training when the next step would eat into that reserve.

    budget ─ spent so far (load, base evaluation, mining) ─ reserve (encode + publication) = training's share

The encode is `n_docs / docs/s`, the docs/s timed by the corpus-encoder race's probe
(training.export.corpus_encoder.docs_per_s) on a seeded sample of the corpus with the base model (the tuned
model's architecture and length: the same cost per document). It is torch's rate even where
ONNX int8 will encode the corpus: an over-estimate (int8 is ~2.5x faster on VNNI CPUs), never an under-one.
The publication (gap report, lexical index and fusion tuning, FAISS index, ONNX export and check, the
distilled query encoders) is a measured line in the corpus size, fitted to the phase tables of two full
retrains (bench/results/retrain_scale_demo.json: 1,100 documents; retrain_scale_packages15k.json: 15,000).

A budget that cannot cover even the reserve fails before training (BudgetTooSmall): training 0 steps and
publishing the base model again would spend the budget on nothing. The loop steers by `Deadline`; which
checkpoint is published is training.train.checkpoints' concern.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from contract.errors import ConfigError

# the publication's seconds besides the distilled query encoders: ~20 s at 1,100 documents, ~57 s at 15,000
# (gap report, lexical index + fusion tuning, index + bundle, ONNX export + check, publish)
PUBLISH_FIXED_S = 17.0
PUBLISH_PER_DOC_S = 0.0027
# the distilled static query tower, when it runs: 51 s at 1,100 documents, 209 s at 15,000
DISTILL_FIXED_S = 38.0
DISTILL_PER_DOC_S = 0.0114
# the tuned encode's phase also encodes the evaluation and validation queries and scores every mode:
# 214 s for 15,000 documents whose pure encode the probe puts at ~190 s (retrain_scale_packages15k.json)
ENCODE_OVERHEAD = 1.15
SAFETY = 1.1  # the reserve is an estimate; a margin keeps the run inside the budget it was given


class BudgetTooSmall(ConfigError):
    """The time budget does not cover what must follow training (the corpus encode and publication)."""


@dataclass(frozen=True)
class Estimate:
    """What the run expects the work after training to cost, and where the encode's rate came from."""

    n_docs: int
    docs_per_s: float
    docs_per_s_from: str  # how the rate was measured
    encode_s: float
    publication_s: float

    @property
    def reserve_s(self) -> float:
        return SAFETY * (self.encode_s + self.publication_s)


def estimate(
    n_docs: int, docs_per_s: float, docs_per_s_from: str, *, publishes: bool, distills: bool
) -> Estimate:
    """The encode at `docs_per_s` and the publication's measured line (the distilled encoders if they run);
    a run that only trains (`train`, no bundle) reserves the gap report and the encoder race alone."""
    publication = PUBLISH_FIXED_S + (PUBLISH_PER_DOC_S * n_docs if publishes else 0.0)
    if publishes and distills:
        publication += DISTILL_FIXED_S + DISTILL_PER_DOC_S * n_docs
    encode = ENCODE_OVERHEAD * n_docs / docs_per_s
    return Estimate(n_docs, round(docs_per_s, 2), docs_per_s_from, round(encode, 1), round(publication, 1))


class Deadline:
    """Training's share of the budget, counted from `started` (the run's start, a perf_counter value)."""

    def __init__(self, budget_s: float, started: float, estimate: Estimate):
        self.budget_s, self.started, self.estimate = budget_s, started, estimate
        self.train_started = time.perf_counter()
        self.spent_before_s = self.train_started - started  # loading, the base evaluation, mining
        self.train_s = budget_s - self.spent_before_s - estimate.reserve_s
        if self.train_s <= 0:
            raise BudgetTooSmall(
                f"time budget {budget_s:.0f}s is too small: {self.spent_before_s:.0f}s spent before training, "
                f"and the corpus encode ({estimate.encode_s:.0f}s for {estimate.n_docs} documents at "
                f"{estimate.docs_per_s:.1f} docs/s) plus publication (~{estimate.publication_s:.0f}s) need "
                f"~{estimate.reserve_s:.0f}s with a {SAFETY:.0%} margin: give at least "
                f"{self.spent_before_s + estimate.reserve_s:.0f}s, or no budget"
            )

    def left_s(self) -> float:
        """Seconds of training's share still unspent."""
        return self.train_s - (time.perf_counter() - self.train_started)

    def room_for(self, seconds: float) -> bool:
        """Would `seconds` more of training still end inside training's share?"""
        return seconds <= self.left_s()

    def steps_that_fit(self, done: int, planned: int, per_step_s: float) -> int:
        """The total steps the schedule should aim at: those done plus what the time left holds, at most
        the recipe's own (a budget never trains longer than the unbudgeted run)."""
        more = int(max(0.0, self.left_s()) / per_step_s) if per_step_s > 0 else planned
        return max(done, min(planned, done + more))

    def record(self) -> dict[str, Any]:
        return {
            "time_budget_s": self.budget_s,
            "estimate": {**asdict(self.estimate), "reserve_s": round(self.estimate.reserve_s, 1)},
            "spent_before_training_s": round(self.spent_before_s, 1),
            "training_share_s": round(self.train_s, 1),
        }
