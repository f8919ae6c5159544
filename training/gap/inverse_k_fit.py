"""R̂(k) ≈ a + b/k: the WLS fit over the range where the risk is linear in 1/k, its bootstrap, k_sufficient."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    bench/gap/gap_validation.py table 1).
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
