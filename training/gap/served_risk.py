"""Held-out InfoNCE risk of a served query encoder, in the report's setting (same k, same τ).

A distilled query encoder changes the model that actually answers queries, so the generalization-gap
report (about the full model) would otherwise describe a model nobody serves. This computes, on the
evaluation anchors (query, relevant document), the P1 risk l = log(1 + Σ_j e^{(s_j − s⁺)/τ}) − log k with
k random pool negatives (training.gap.estimators, Whiteley 2026, arXiv 2607.09405), for the full query
encoder and each variant against the *same* fixed document vectors, with the same negatives for every
encoder so that their difference is paired, and a query-level bootstrap CI for each risk and difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from training.gap.bootstrap import bootstrap_means, percentile_ci
from training.gap.estimators import pad_exclusions, risk_with_random_negatives


def served_risks(
    query_emb: Mapping[str, np.ndarray],
    doc_emb: np.ndarray,
    qids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    *,
    k: int,
    tau: float,
    seed: int = 0,
    n_boot: int = 1000,
    level: float = 0.95,
) -> dict[str, Any]:
    """{"k", "temperature", "n_anchors", name: {"risk_test": {...}, "delta_vs_full": {...}}} for every
    encoder in `query_emb` ((n_queries, D) rows in `qids` order; "full" is the reference)."""
    rows, cols, exclude = _anchors(qids, qrels, doc_ids)
    out: dict[str, Any] = {"k": k, "temperature": tau, "n_anchors": len(rows)}
    if not rows:
        return out
    r, pos_col = np.asarray(rows), np.asarray(cols)
    excl = pad_exclusions(exclude, doc_emb.shape[0])
    method = (
        f"bootstrap percentile over queries ({n_boot}), k={k} random pool negatives, same for every encoder"
    )
    losses = {}
    for name, q in query_emb.items():
        sim = (q @ doc_emb.T)[r]  # (n_anchors, n_docs)
        rng = np.random.default_rng(seed)  # the same negatives for every encoder: a paired comparison
        losses[name] = risk_with_random_negatives(sim, sim[np.arange(len(r)), pos_col], excl, k, tau, rng)
    for name, loss in losses.items():
        # the same resamples (seed + 1) for every encoder and for the paired differences
        entry = {"risk_test": _mean_with_ci(loss, r, n_boot, seed + 1, level, method)}
        if name != "full" and "full" in losses:
            diff = loss - losses["full"]  # (n_anchors,) paired
            entry["delta_vs_full"] = _mean_with_ci(
                diff, r, n_boot, seed + 1, level, method + "; paired differences"
            )
        out[name] = entry
    return out


def _anchors(
    qids: Sequence[str], qrels: Mapping[str, Mapping[str, int]], doc_ids: Sequence[str]
) -> tuple[list[int], list[int], list[list[int]]]:
    """One anchor per (query, relevant document): its query row, its document column, and the columns
    of all the query's relevant documents (never drawn as its negatives)."""
    column = {d: i for i, d in enumerate(doc_ids)}
    rows, cols, exclude = [], [], []
    for qi, qid in enumerate(qids):
        relevant = [column[d] for d in qrels.get(qid, {}) if d in column]
        for c in relevant:
            rows.append(qi)
            cols.append(c)
            exclude.append(relevant)
    return rows, cols, exclude


def _mean_with_ci(
    values: np.ndarray, groups: np.ndarray, n_boot: int, seed: int, level: float, method: str
) -> dict[str, Any]:
    """The mean of per-anchor values with a bootstrap percentile CI that resamples queries (`groups`)."""
    boot = bootstrap_means(values, n_boot, np.random.default_rng(seed), groups=groups)
    lo, hi = percentile_ci(boot, level)
    return {"value": float(values.mean()), "ci_low": lo, "ci_high": hi, "level": level, "method": method}
