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


def bootstrap_means_and_ses(
    values: np.ndarray, n_boot: int, rng: np.random.Generator, groups: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster-bootstrap replicates of the mean of `values` (n,) and of its standard error, (n_boot,) each.

    The same resamples as `bootstrap_means` (same draws from `rng`). The standard error of a replicate is
    the linearised one of a ratio of sums over G resampled groups (Cochran 1977, §6.11),
    se² = G/(G − 1) · Σ_g w_g (S_g − m·C_g)² / (Σ_g w_g C_g)²  (S_g, C_g: a group's sum and count, w_g its
    copies), which is s²/n with one anchor per group.
    """
    values = np.asarray(values, dtype=np.float64)
    if groups is None:
        groups = np.arange(values.shape[0])
    _, gid = np.unique(groups, return_inverse=True)
    n_groups = int(gid.max()) + 1
    counts = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=n_boot).astype(np.float64)
    sums = np.bincount(gid, weights=values, minlength=n_groups)  # (G,)
    sizes = np.bincount(gid, minlength=n_groups).astype(np.float64)  # (G,)
    tot_c = counts @ sizes  # (B,)
    means = (counts @ sums) / tot_c  # (B,)
    sq = counts @ sums**2 - 2.0 * means * (counts @ (sums * sizes)) + means**2 * (counts @ sizes**2)  # (B,)
    ses = np.sqrt(np.maximum(sq, 0.0) * n_groups / max(n_groups - 1, 1)) / tot_c
    return means, ses


def mean_se(values: np.ndarray, groups: np.ndarray | None = None) -> float:
    """The cluster (ratio) standard error of the mean of `values` over its groups (as in the replicates)."""
    values = np.asarray(values, dtype=np.float64)
    if groups is None:
        groups = np.arange(values.shape[0])
    _, gid = np.unique(groups, return_inverse=True)
    n_groups = int(gid.max()) + 1
    sums = np.bincount(gid, weights=values, minlength=n_groups)
    sizes = np.bincount(gid, minlength=n_groups).astype(np.float64)
    m = sums.sum() / sizes.sum()
    return float(np.sqrt(((sums - m * sizes) ** 2).sum() * n_groups / max(n_groups - 1, 1)) / sizes.sum())


def studentized_ci(
    point: float, se: float, boot: np.ndarray, boot_se: np.ndarray, level: float = 0.95
) -> tuple[float, float]:
    """Bootstrap-t interval (Efron & Tibshirani 1993, §12.5): t* = (θ* − θ̂)/se*, then
    [θ̂ − t*_{1−α/2}·se, θ̂ − t*_{α/2}·se]. For the mean of a right-skewed variable it reaches further up than
    the percentile interval, which misses the mean on the high side more often than α/2 (per-anchor InfoNCE
    losses at τ = 0.05 have skewness 4–8: bench/gap/predictive_validity.py and tests/training/gap/test_gap_estimators.py)."""
    ok = boot_se > 0
    if not np.any(ok) or se <= 0:
        return percentile_ci(boot, level)
    t = (boot[ok] - point) / boot_se[ok]
    alpha = (1.0 - level) / 2.0
    t_lo, t_hi = np.quantile(t, [alpha, 1.0 - alpha])
    return float(point - t_hi * se), float(point - t_lo * se)


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates (Efron & Tibshirani 1993, §13.3)."""
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha], axis=0)
    return float(lo), float(hi)


@dataclass(frozen=True)
class Resampling:
    """How one report draws its intervals: resamples per interval, their confidence level, and the one
    random stream every section draws from in turn (so a seed fixes the whole report)."""

    n_boot: int
    level: float
    rng: np.random.Generator


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
    """R_test − R_train with studentized bootstrap CIs (`studentized_ci`) for both risks and their gap,
    resampling anchors (queries, with groups) independently within each split."""
    b_train, s_train = bootstrap_means_and_ses(l_train, n_boot, rng, groups_train)
    b_test, s_test = bootstrap_means_and_ses(l_test, n_boot, rng, groups_test)
    r_train, r_test = float(np.mean(l_train)), float(np.mean(l_test))
    se_train, se_test = mean_se(l_train, groups_train), mean_se(l_test, groups_test)
    return GapEstimate(
        train=r_train,
        test=r_test,
        gap=r_test - r_train,
        train_ci=studentized_ci(r_train, se_train, b_train, s_train, level),
        test_ci=studentized_ci(r_test, se_test, b_test, s_test, level),
        gap_ci=studentized_ci(
            r_test - r_train,
            float(np.hypot(se_train, se_test)),
            b_test - b_train,
            np.hypot(s_train, s_test),
            level,
        ),
        train_boot=b_train,
        test_boot=b_test,
    )
