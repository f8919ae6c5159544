"""The InfoNCE risk on the judged traffic, in the report's setting, and its verdict against the prediction.

Anchors are (query, positively judged document) pairs; the risk is the gap report's P1 risk (Whiteley 2026,
arXiv 2607.09405, eqs 1-2) l = log(1 + Σ_j e^{(s_j − s⁺)/τ}) − log k with k negatives drawn i.i.d.
uniformly (with replacement) from the pool minus the query's positives, and a percentile bootstrap over
queries. This is the formula of training/gap/estimators.py (risk_with_random_negatives) and
training/gap/bootstrap.py (bootstrap_means), restated here because the API may import only `contract`;
tests/app/writes/test_feedback_live.py checks it against a brute-force recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

N_BOOT = 1000  # as the report's served risks (training/gap/served_risk.py)
LEVEL = 0.95
# Below this many judged queries no verdict: the percentile bootstrap over n queries has a half-width of
# about 1.96·sd/√n, and a per-query P1 risk's sd is of the order of the risk itself (~1 nat on the test
# fixture), so under 20 queries the interval is wider than ±0.4 nats — wider than any gap the report
# tells apart — and the percentile interval itself is unreliable for n < 20 (Efron & Tibshirani 1993, §13).
MIN_QUERIES = 20

Verdict = Literal["consistent", "worse than predicted", "better than predicted"]


@dataclass(frozen=True)
class LiveRisk:
    value: float
    ci_low: float
    ci_high: float
    n_anchors: int
    n_queries: int


def p1_losses(
    sim: np.ndarray, pos: np.ndarray, allowed: list[np.ndarray], k: int, tau: float, rng: np.random.Generator
) -> np.ndarray:
    """Per-anchor P1 loss: `sim` (n, N) similarity to the pool, `pos` (n,) to the positive, `allowed[i]`
    the pool columns anchor i may draw as negatives; k negatives each, logits divided by τ."""
    out = np.empty(len(pos), dtype=np.float64)
    for i, cols in enumerate(allowed):
        neg = sim[i, cols[rng.integers(0, len(cols), size=k)]].astype(np.float64)  # (k,)
        z = np.concatenate([[0.0], (neg - pos[i]) / tau])  # the positive's own term is e^0 = 1
        m = z.max()
        out[i] = m + np.log(np.exp(z - m).sum()) - np.log(k)
    return out


def risk_with_ci(losses: np.ndarray, groups: np.ndarray, seed: int = 0) -> LiveRisk:
    """Mean loss and its percentile interval, resampling queries (`groups`, the cluster bootstrap)."""
    _, gid = np.unique(groups, return_inverse=True)
    n_groups = int(gid.max()) + 1
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=N_BOOT)  # (B, G)
    weights = counts[:, gid].astype(np.float64)  # (B, n)
    boot = (weights @ losses) / weights.sum(axis=1)
    alpha = (1.0 - LEVEL) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return LiveRisk(float(losses.mean()), float(lo), float(hi), len(losses), n_groups)


def verdict(live: LiveRisk, predicted_low: float, predicted_high: float) -> Verdict:
    """The rule: intervals that overlap are consistent; the live interval wholly above the predicted one
    is worse than predicted, wholly below it better."""
    if live.ci_low > predicted_high:
        return "worse than predicted"
    if live.ci_high < predicted_low:
        return "better than predicted"
    return "consistent"


def rank_metrics(sim: np.ndarray, positives: list[np.ndarray]) -> tuple[float, float]:
    """MRR and nDCG@10 (binary gains) of each query's judged positives over the pool, `sim` (q, N)."""
    mrr, ndcg = [], []
    for row, cols in zip(sim, positives, strict=True):
        order = np.argsort(-row, kind="stable")
        ranks = np.sort(np.flatnonzero(np.isin(order, cols))) + 1  # 1-based ranks of the positives
        mrr.append(1.0 / ranks[0])
        dcg = sum(1.0 / np.log2(r + 1) for r in ranks if r <= 10)
        ideal = sum(1.0 / np.log2(r + 1) for r in range(1, min(len(cols), 10) + 1))
        ndcg.append(dcg / ideal)
    return float(np.mean(mrr)), float(np.mean(ndcg))
