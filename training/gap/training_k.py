"""The k of training: how many negatives one training row was scored against, from the configuration
(an upper bound) or from the trainer's per-step log (what the rows actually saw). The gap report is
computed at that k."""

from __future__ import annotations

from typing import Any

import numpy as np

from contract.config import TrainConfig

K_RULE = (
    "k = batch_size − 1 (in-batch) + batch_size × hard_negatives (mined negatives are shared by the whole "
    "batch) + random_negatives: the negatives one training row was scored against"
)


def training_k(config: TrainConfig) -> int:
    """The most negatives one training row can see (rule: `K_RULE`): an upper bound on the actual k."""
    return config.batch_size - 1 + config.batch_size * config.hard_negatives + config.random_negatives


def actual_training_k(records: list[dict[str, Any]], config: TrainConfig) -> tuple[int, str]:
    """The k training rows actually saw, from the trainer's per-step log, and the rule that says how.

    Mined negatives shared by a batch are deduplicated (and dropped when they are a positive of another
    row) and an epoch's tail batch is smaller, so `training_k(config)` is only an upper bound. Steps logged
    before `n_negatives` existed give batch_size − 1 + n_extra_negatives (exact except in tail batches).
    """
    upper = training_k(config)
    if not records:
        return upper, K_RULE
    per_step = np.array(
        [r.get("n_negatives", config.batch_size - 1 + r.get("n_extra_negatives", 0)) for r in records]
    )
    k = max(1, round(float(per_step.mean())))
    rule = (
        f"mean negatives per training row over the {len(per_step)} steps (min {per_step.min()}, max "
        f"{per_step.max()}; in-batch + deduplicated mined + random), rounded; the configuration's upper "
        f"bound is {upper} ({K_RULE})"
    )
    return k, rule
