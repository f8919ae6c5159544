"""Held-out InfoNCE risk of a served query encoder, in the report's setting (same k, same τ).

A distilled query encoder changes the model that actually answers queries, so the generalization-gap
report (about the full model) would otherwise describe a model nobody serves. This computes, on the
evaluation anchors (query, relevant document), the P1 risk l = log(1 + Σ_j e^{(s_j − s⁺)/τ}) − log k with
k random pool negatives (training.gap.estimators, Whiteley 2026, arXiv 2607.09405), for the full query
encoder and each variant against the *same* fixed document vectors, with the same negatives for every
encoder so that their difference is paired, and a query-level bootstrap CI for each risk and difference.
The anchors, the scores (the model's own Similarity) and the intervals are the gap report's
(training.gap.anchors, training.gap.intervals).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from contract.encoding.similarity import Similarity
from training.gap.anchors import build_anchors
from training.gap.bootstrap import bootstrap_means
from training.gap.estimators import risk_with_random_negatives
from training.gap.intervals import estimate_from_boot

N_BOOT = 1000  # resamples per interval, at LEVEL: what every caller asked for when these were parameters
LEVEL = 0.95


def served_risks(
    query_emb: Mapping[str, np.ndarray],
    doc_emb: np.ndarray,
    qids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    *,
    similarity: Similarity,
    n_negatives: int,
    seed: int = 0,
) -> dict[str, Any]:
    """{"k", "temperature", "n_anchors", name: {"risk_test": {...}, "delta_vs_full": {...}}} for every
    encoder in `query_emb` ((n_queries, D) normalised rows in `qids` order; "full" is the reference),
    scored against `doc_emb` (normalised rows in `doc_ids` order) by `similarity`, the logits divided by
    its `logit_divisor()`; `n_negatives` random pool negatives per anchor (the report's k); N_BOOT resamples
    for each interval at LEVEL."""
    n_boot, level = N_BOOT, LEVEL
    column = {d: i for i, d in enumerate(doc_ids)}
    in_pool = {q: {d: r for d, r in qrels.get(q, {}).items() if d in column} for q in qids}
    tau = similarity.logit_divisor()
    n_anchors = sum(len(relevant) for relevant in in_pool.values())
    out: dict[str, Any] = {"k": n_negatives, "temperature": tau, "n_anchors": n_anchors}
    if not n_anchors:
        return out
    method = (
        f"bootstrap percentile over queries ({n_boot}), k={n_negatives} random pool negatives, same for "
        "every encoder"
    )
    losses, groups = {}, np.zeros(0)
    for name, q in query_emb.items():
        a = build_anchors(similarity, qids, in_pool, q, doc_emb, column)
        rng = np.random.default_rng(seed)  # the same negatives for every encoder: a paired comparison
        losses[name] = risk_with_random_negatives(a.sim, a.pos, a.exclude, n_negatives, tau, rng)
        groups = a.groups  # the same anchors, query by query, for every encoder
    for name, loss in losses.items():
        # the same resamples (seed + 1) for every encoder and for the paired differences
        entry = {"risk_test": _mean_with_ci(loss, groups, n_boot, seed + 1, level, method)}
        if name != "full" and "full" in losses:
            diff = loss - losses["full"]  # (n_anchors,) paired
            entry["delta_vs_full"] = _mean_with_ci(
                diff, groups, n_boot, seed + 1, level, method + "; paired differences"
            )
        out[name] = entry
    return out


def _mean_with_ci(
    values: np.ndarray, groups: np.ndarray, n_boot: int, seed: int, level: float, method: str
) -> dict[str, Any]:
    """The mean of per-anchor values with a bootstrap percentile CI that resamples queries (`groups`)."""
    boot = bootstrap_means(values, n_boot, np.random.default_rng(seed), groups=groups)
    return estimate_from_boot(float(values.mean()), boot, level, method).model_dump(mode="json")
