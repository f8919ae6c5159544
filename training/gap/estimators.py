"""Estimators of the InfoNCE generalization gap: pure, vectorised numpy functions (Whiteley 2026, arXiv 2607.09405).

Conventions. `sim` is an (n, N) similarity matrix between n anchors and a pool of N documents, `pos`
(n,) the similarity of each anchor to its positive, and `exclude` an (n, P) int array of pool columns an
anchor may never draw as a negative (its own positives), padded with -1. Everything is float64 and
logsumexp-stable; τ scales the logits (τ = 1 for AnInfoNCE, whose similarity already is the logit).

The risk uses the normalisation of Whiteley (2026, arXiv 2607.09405, eqs 1-2):
    l_i = log(1 + Σ_j e^{(s_ij − s⁺_i)/τ}) − log k   (standard InfoNCE − log k),
with the k negatives drawn i.i.d. uniformly from the pool minus the anchor's positives — random,
never mined, as P1's assumption (A) requires. (The MI bound needs another sampler, the positives'
marginal: training.gap.mutual_info.) Drawing with replacement makes the pool's
empirical law the negative law, so R̂(k) → CE∞ (plug-in over the same pool) exactly as k → ∞.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

_CHUNK_ELEMENTS = 4_000_000  # float64 elements per temporary block (32 MB)


def logsumexp_rows(x: np.ndarray) -> np.ndarray:
    """log Σ_j e^{x_ij} per row, max-shifted (scipy's logsumexp is ~20x slower on big arrays here)."""
    m = x.max(axis=1)  # (n,)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.log(np.exp(x - m[:, None]).sum(axis=1)) + m


# -- negatives ------------------------------------------------------------------------------------------
def pad_exclusions(exclude: list[np.ndarray] | list[list[int]], n_pool: int) -> np.ndarray:
    """Ragged per-anchor exclusion lists -> (n, P) sorted int64 array padded with -1."""
    width = max((len(e) for e in exclude), default=0)
    out = np.full((len(exclude), max(width, 1)), -1, dtype=np.int64)
    for i, cols in enumerate(exclude):
        cols = np.unique(np.asarray(cols, dtype=np.int64))
        if cols.size and (cols[0] < 0 or cols[-1] >= n_pool):
            raise ValueError(f"exclusion for anchor {i} points outside the pool of {n_pool} documents")
        out[i, : cols.size] = cols
    return out


def sample_negatives(n_pool: int, k: int, exclude: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n, k) pool columns drawn i.i.d. uniformly from the pool minus each anchor's excluded columns."""
    n = exclude.shape[0]
    allowed = n_pool - (exclude >= 0).sum(axis=1)  # (n,)
    if np.any(allowed <= 0):
        raise ValueError("an anchor has no admissible negative: its positives cover the whole pool")
    idx = (rng.random((n, k)) * allowed[:, None]).astype(np.int64)  # (n, k) rank among allowed columns
    # Walking the sorted exclusions in order maps a rank among allowed columns to a pool column.
    sentinel = np.where(exclude >= 0, exclude, np.iinfo(np.int64).max)  # (n, P)
    for p in range(exclude.shape[1]):
        idx += sentinel[:, p : p + 1] <= idx
    return idx


# -- per-anchor risk ------------------------------------------------------------------------------------
def infonce_risk(pos: np.ndarray, neg: np.ndarray, tau: float) -> np.ndarray:
    """Per-anchor P1 risk l_i = log(1 + Σ_j e^{(neg_ij − pos_i)/τ}) − log k; pos (n,), neg (n, k)."""
    pos = np.asarray(pos, dtype=np.float64)
    neg = np.asarray(neg, dtype=np.float64)
    k = neg.shape[1]
    z = (neg - pos[:, None]) / tau  # (n, k)
    logits = np.concatenate([np.zeros((z.shape[0], 1)), z], axis=1)  # (n, 1 + k)
    return logsumexp_rows(logits) - math.log(k)


def risk_with_random_negatives(
    sim: np.ndarray, pos: np.ndarray, exclude: np.ndarray, k: int, tau: float, rng: np.random.Generator
) -> np.ndarray:
    """Per-anchor risk (n,) with k fresh random pool negatives per anchor."""
    n, n_pool = sim.shape
    out = np.empty(n)
    step = max(1, _CHUNK_ELEMENTS // max(k, 1))
    for start in range(0, n, step):
        rows = slice(start, start + step)
        cols = sample_negatives(n_pool, k, exclude[rows], rng)  # (m, k)
        neg = np.take_along_axis(np.asarray(sim[rows], dtype=np.float64), cols, axis=1)  # (m, k)
        out[rows] = infonce_risk(pos[rows], neg, tau)
    return out


def risk_curve(
    sim: np.ndarray,
    pos: np.ndarray,
    exclude: np.ndarray,
    ks: list[int],
    tau: float,
    rng: np.random.Generator,
    replicates: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """R̂(k) per anchor for every k, and the negative-sampling variance of R̂(k).

    Each k and each replicate draws its own negatives, so the errors of different k are independent
    given the anchors (the WLS fit and its linearity test rely on that). Returns per-anchor risk averaged
    over replicates, (n, len(ks)), and Var_neg[R̂(k)] (len(ks),), estimated from the replicate spread.
    """
    if replicates < 2:
        raise ValueError("replicates must be >= 2 to estimate the sampling variance")
    n = sim.shape[0]
    per_anchor = np.empty((n, len(ks)))
    var = np.empty(len(ks))
    for c, k in enumerate(ks):
        draws = np.stack(
            [risk_with_random_negatives(sim, pos, exclude, k, tau, rng) for _ in range(replicates)]
        )
        per_anchor[:, c] = draws.mean(axis=0)
        # unbiased per-anchor variance of one draw, then of the mean over replicates and anchors
        var[c] = draws.var(axis=0, ddof=1).mean() / replicates / n
    return per_anchor, var


# -- plug-in CE∞ ----------------------------------------------------------------------------------------
def pool_log_mu(sim: np.ndarray, exclude: np.ndarray, tau: float, scale: float = 1.0) -> np.ndarray:
    """log μ(a) = log mean_{pool minus own positives} e^{scale·s/τ}, per anchor (n,)."""
    n, n_pool = sim.shape
    out = np.empty(n)
    step = max(1, _CHUNK_ELEMENTS // max(n_pool, 1))
    for start in range(0, n, step):
        rows = np.arange(start, min(start + step, n))
        logits = np.asarray(sim[rows], dtype=np.float64) * (scale / tau)  # (m, N)
        ex = exclude[rows]  # (m, P)
        r, c = np.nonzero(ex >= 0)
        logits[r, ex[r, c]] = -np.inf
        allowed = n_pool - (ex >= 0).sum(axis=1)
        out[rows] = logsumexp_rows(logits) - np.log(allowed)
    return out


def plugin_ce_inf_terms(sim: np.ndarray, pos: np.ndarray, exclude: np.ndarray, tau: float) -> np.ndarray:
    """Per-anchor CE∞ terms −s⁺/τ + log μ(a) (from Whiteley 2026, arXiv 2607.09405, eq 7); their mean is CE∞."""
    return -np.asarray(pos, dtype=np.float64) / tau + pool_log_mu(sim, exclude, tau)


def first_order_terms(
    sim: np.ndarray, pos: np.ndarray, exclude: np.ndarray, tau: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-anchor d1 = e^{s⁺/τ}/μ(a) and c1 = ½ Var(e^{s/τ})/μ(a)², so R(k) ≈ CE∞ + (E d1 − E c1)/k.

    A second-order expansion of the proofs of Whiteley 2026, arXiv 2607.09405; the 1/k regime needs k ≫ E d1.
    """
    log_mu = pool_log_mu(sim, exclude, tau)
    log_m2 = pool_log_mu(sim, exclude, tau, scale=2.0)
    d1 = np.exp(np.asarray(pos, dtype=np.float64) / tau - log_mu)
    c1 = 0.5 * np.expm1(log_m2 - 2.0 * log_mu)
    return d1, c1


# -- bootstrap ------------------------------------------------------------------------------------------
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


def hoeffding_halfwidth(tau: float, n: int, delta: float = 0.05) -> float:
    """(4/τ)·sqrt(log(2/δ)/(2n)): the loss has range ≤ 4/τ (P1 Lemma 5), so Hoeffding applies."""
    return (4.0 / tau) * math.sqrt(math.log(2.0 / delta) / (2.0 * n))


# -- R(k) ≈ a + b/k -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InverseKFitResult:
    a: float
    b: float
    r2: float
    k_min: int
    k_max: int
    n_points: int
    accepted: bool
    rule: str


def wls_inverse_k(ks: np.ndarray, r: np.ndarray, w: np.ndarray) -> tuple[float, float, float]:
    """Weighted least squares of r on [1, 1/k]; returns a, b and the weighted R²."""
    x = 1.0 / np.asarray(ks, dtype=np.float64)
    sw = w.sum()
    xm, rm = (w * x).sum() / sw, (w * r).sum() / sw
    sxx = (w * (x - xm) ** 2).sum()
    b = float((w * (x - xm) * (r - rm)).sum() / sxx) if sxx > 0 else 0.0
    a = float(rm - b * xm)
    ss_res = float((w * (r - a - b * x) ** 2).sum())
    ss_tot = float((w * (r - rm) ** 2).sum())
    return a, b, (1.0 - ss_res / ss_tot) if ss_tot > 0 else 1.0


FIT_RULE = (
    "widest range [k_min, K] of the grid (at least 3 points, k_min ≥ 2 and k_min ≥ d1, since the 1/k regime "
    "needs k ≫ d1) whose WLS fit of a + b/k leaves a reduced chi-square ≤ the 99% critical value of "
    "chi²(m−2)/(m−2), weights = 1/Var_neg[R̂(k)] from independent negative draws; if none passes, the 3 "
    "largest k (accepted = false)"
)


def fit_inverse_k(
    ks: list[int], r: np.ndarray, var: np.ndarray, min_points: int = 3, k_floor: float = 2.0
) -> InverseKFitResult:
    """Fit R̂(k) ≈ a + b/k on the range where R̂ is linear in 1/k (rule: `FIT_RULE`).

    `k_floor`: the smallest k a range may start at (the estimated d1): below it R̂(k) can look linear in
    1/k within the noise while still far from the regime, and the intercept is then wrong (at τ = 0.05,
    d = 16 a range from k = 64 with d1 ≈ 800 passed the linearity test and missed CE∞ by 9%,
    bench/gap_validation.py table 1).
    """
    from scipy.stats import chi2

    ks_arr = np.asarray(ks)
    r = np.asarray(r, dtype=np.float64)
    w = 1.0 / np.maximum(np.asarray(var, dtype=np.float64), 1e-30)
    for start in range(len(ks)):
        if ks_arr[start] < max(2.0, k_floor):
            continue  # k = 1 is dominated by the "1 +" term; below d1 the regime has not begun
        m = len(ks) - start
        if m < min_points:
            break
        sl = slice(start, None)
        a, b, r2 = wls_inverse_k(ks_arr[sl], r[sl], w[sl])
        chi = float((w[sl] * (r[sl] - a - b / ks_arr[sl]) ** 2).sum())
        if chi / (m - 2) <= chi2.ppf(0.99, m - 2) / (m - 2):
            return InverseKFitResult(a, b, r2, int(ks_arr[start]), int(ks_arr[-1]), m, True, FIT_RULE)
    sl = slice(max(0, len(ks) - min_points), None)
    a, b, r2 = wls_inverse_k(ks_arr[sl], r[sl], w[sl])
    return InverseKFitResult(a, b, r2, int(ks_arr[sl][0]), int(ks_arr[-1]), len(ks_arr[sl]), False, FIT_RULE)


def bootstrap_fit_intercepts(
    boot_curves: np.ndarray, ks: list[int], var: np.ndarray, k_min: int
) -> np.ndarray:
    """Intercept a of the WLS fit for every bootstrap replicate of the curve (B, len(ks)) -> (B,)."""
    ks_arr = np.asarray(ks)
    sel = ks_arr >= k_min
    x = 1.0 / ks_arr[sel]  # (m,)
    w = 1.0 / np.maximum(var[sel], 1e-30)  # (m,)
    r = boot_curves[:, sel]  # (B, m)
    xm = (w * x).sum() / w.sum()
    rm = (r * w).sum(axis=1) / w.sum()  # (B,)
    sxx = (w * (x - xm) ** 2).sum()
    b = ((r - rm[:, None]) * (w * (x - xm))).sum(axis=1) / sxx if sxx > 0 else np.zeros(len(r))
    return rm - b * xm


def k_sufficient(ks: list[int], delta: np.ndarray, eps: float = 0.01) -> int | None:
    """Smallest grid k with |Δ(k')| < eps for every k' ≥ k (more negatives stop changing the risk)."""
    ok = np.abs(np.asarray(delta)) < eps
    for i, k in enumerate(ks):
        if ok[i:].all():
            return int(k)
    return None


def k_sufficient_interval(
    ks: list[int], boot_delta: np.ndarray, eps: float = 0.01, level: float = 0.95
) -> tuple[int | None, int | None]:
    """Percentile interval of k_sufficient over bootstrap replicates of Δ(k) (B, len(ks)).

    A replicate whose Δ never settles within the grid counts as k = ∞; an end of the interval at ∞ is
    returned as None ("not reached within the grid").
    """
    ok = np.abs(np.asarray(boot_delta)) < eps  # (B, m)
    settled = np.flip(np.cumprod(np.flip(ok, axis=1), axis=1), axis=1).astype(bool)  # all k' ≥ k below eps
    first = np.where(settled.any(axis=1), settled.argmax(axis=1), len(ks))  # (B,) index, len(ks) = never
    grid = np.asarray(list(ks) + [np.iinfo(np.int64).max])
    alpha = (1.0 - level) / 2.0
    lo, hi = (int(grid[int(np.quantile(first, q, method="inverted_cdf"))]) for q in (alpha, 1.0 - alpha))
    return (None if lo == grid[-1] else lo), (None if hi == grid[-1] else hi)


def power_of_two_grid(k_max: int) -> list[int]:
    """[1, 2, 4, …, 2^⌊log2 k_max⌋]."""
    return [2**e for e in range(int(math.log2(max(k_max, 1))) + 1)]


# -- P1 bound terms -------------------------------------------------------------------------------------
_FLOAT_CAP = 1e300  # values beyond float range are reported as this (and are vacuous anyway)


def _capped_exp(log_value: float) -> float:
    return _FLOAT_CAP if log_value > math.log(_FLOAT_CAP) else math.exp(log_value)


def sample_variability_term(tau: float, n: int, delta: float = 0.05) -> float:
    """(12/τ)·sqrt(log(2/δ)/(2n)) — P1 Proposition 3 / Theorem 1."""
    return (12.0 / tau) * math.sqrt(math.log(2.0 / delta) / (2.0 * n))


def finite_k_log_term(tau: float, k: int) -> float:
    """log(1 + e^{2/τ}/k) — P1 Proposition 1 (lower side) and Theorem 1's finite-k bias."""
    x = 2.0 / tau - math.log(k)
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def prop1_upper_term(tau: float, k: int) -> float:
    """(e^{2/τ} − 1)²/(8k) — P1 Proposition 1 (upper side), computed in log space."""
    log_v = 2.0 * (2.0 / tau + math.log(-math.expm1(-2.0 / tau))) - math.log(8.0 * k)
    return _capped_exp(log_v)


def is_vacuous(value: float, k: int) -> bool:
    """A term exceeding log(k+1), the largest InfoNCE improvement possible with k negatives, is vacuous."""
    return value > math.log(k + 1)


# -- mutual information ---------------------------------------------------------------------------------
def mi_lower_bound(risk: float, k: int) -> float:
    """I_NCE(k) = log(k+1) − mean l_NCE = log(1 + 1/k) − R̂(k) (van den Oord et al. 2018, §2.3).

    A lower bound on MI only when R̂(k)'s negatives follow the positives' marginal (training.gap.mutual_info).
    """
    return math.log1p(1.0 / k) - risk
