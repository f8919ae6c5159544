"""Bootstrap replicates and percentile intervals of mean risks, and the train/test gap with its CI."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def bootstrap_means(
    values: np.ndarray, n_boot: int, rng: np.random.Generator, groups: np.ndarray | None = None
) -> np.ndarray:
    """Bootstrap replicates of the mean of `values` ((n,) or (n, m)) -> (n_boot,) or (n_boot, m).

    With `groups` (n,) the resampling unit is a group (e.g. a query with several relevant documents) and
    the replicate is the ratio of resampled sums to resampled counts (cluster bootstrap).
    """
    values = np.asarray(values, dtype=np.float64)
    if groups is None:
        groups = np.arange(values.shape[0])
    _, gid = np.unique(groups, return_inverse=True)
    n_groups = int(gid.max()) + 1
    counts = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=n_boot)  # (B, G)
    weights = counts[:, gid].astype(np.float64)  # (B, n) copies of each anchor
    return (weights @ values) / weights.sum(axis=1).reshape((-1,) + (1,) * (values.ndim - 1))


# beyond this pool size the pool bootstrap draws its replicates from their normal limit (a sum of N small
# independent terms) instead of N multinomial counts per replicate
_POOL_EXACT_MAX = 50_000


def pool_bootstrap(influence: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Linearised pool-bootstrap replicates (n_boot,) of a statistic whose first-order dependence on the pool
    is Σ_j w_j g_j (g = `influence` (N,), w the pool's multinomial resampling counts, mean 1): Σ_j (w_j − 1) g_j.

    Their variance is exactly Σ_j (g_j − ḡ)² (Var w_j = 1 − 1/N, Cov = −1/N). Added to independent
    anchor-bootstrap replicates this is the two-way (anchors × pool) bootstrap of a crossed design, whose
    pool half is computed to first order: resampling the pool exactly would cost a pass over the (anchors ×
    pool) matrix per replicate.
    """
    g = np.asarray(influence, dtype=np.float64)
    n_pool = g.size
    if n_pool > _POOL_EXACT_MAX:
        return rng.standard_normal(n_boot) * float(np.sqrt(((g - g.mean()) ** 2).sum()))
    out = np.empty(n_boot)
    step = max(1, 4_000_000 // n_pool)
    for start in range(0, n_boot, step):
        m = min(step, n_boot - start)
        counts = rng.multinomial(n_pool, np.full(n_pool, 1.0 / n_pool), size=m)  # (m, N)
        out[start : start + m] = (counts - 1.0) @ g
    return out


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates (Efron & Tibshirani 1993, §13.3)."""
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha], axis=0)
    return float(lo), float(hi)


@dataclass(frozen=True)
class GapEstimate:
    train: float
    test: float
    gap: float
    train_ci: tuple[float, float]
    test_ci: tuple[float, float]
    gap_ci: tuple[float, float]
    train_boot: np.ndarray  # (n_boot,) bootstrap replicates of R_train
    test_boot: np.ndarray  # (n_boot,) bootstrap replicates of R_test


def gap_with_ci(
    l_train: np.ndarray,
    l_test: np.ndarray,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    rng: np.random.Generator,
    groups_train: np.ndarray | None = None,
    groups_test: np.ndarray | None = None,
) -> GapEstimate:
    """R_test − R_train with a percentile CI, resampling anchors independently within each split."""
    b_train = bootstrap_means(l_train, n_boot, rng, groups_train)
    b_test = bootstrap_means(l_test, n_boot, rng, groups_test)
    r_train, r_test = float(np.mean(l_train)), float(np.mean(l_test))
    return GapEstimate(
        train=r_train,
        test=r_test,
        gap=r_test - r_train,
        train_ci=percentile_ci(b_train, level),
        test_ci=percentile_ci(b_test, level),
        gap_ci=percentile_ci(b_test - b_train, level),
        train_boot=b_train,
        test_boot=b_test,
    )
