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


def sample_negatives(
    n_pool: int, n_negatives: int, exclude: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """(n, k) pool columns, k = n_negatives, drawn i.i.d. uniformly from the pool minus each anchor's
    excluded columns."""
    n = exclude.shape[0]
    allowed = n_pool - (exclude >= 0).sum(axis=1)  # (n,)
    if np.any(allowed <= 0):
        raise ValueError("an anchor has no admissible negative: its positives cover the whole pool")
    idx = (rng.random((n, n_negatives)) * allowed[:, None]).astype(np.int64)  # (n, k) rank among allowed
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
    sim: np.ndarray,
    pos: np.ndarray,
    exclude: np.ndarray,
    n_negatives: int,
    tau: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Per-anchor risk (n,) with k = n_negatives fresh random pool negatives per anchor."""
    n, n_pool = sim.shape
    out = np.empty(n)
    chunk_rows = max(1, _CHUNK_ELEMENTS // max(n_negatives, 1))
    for start in range(0, n, chunk_rows):
        rows = slice(start, start + chunk_rows)
        cols = sample_negatives(n_pool, n_negatives, exclude[rows], rng)  # (m, k)
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
    chunk_rows = max(1, _CHUNK_ELEMENTS // max(n_pool, 1))
    for start in range(0, n, chunk_rows):
        rows = np.arange(start, min(start + chunk_rows, n))
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


# FinitePool.c1_upper: the pool's c1 grew by D over the last doubling of the pool and by D/r over the one before.
# With r < 1 the growth is taken to keep shrinking geometrically, but at most by a ratio C1_GROWTH_RATIO_CAP per
# doubling (at most 3·D still to come); with r ≥ 1 no convergence is visible and C1_NO_CONVERGENCE_FACTOR·D is
# added (ten more doublings of the same growth). Chosen on the worlds of bench/gap/gap_validation.py, table 8: it
# keeps c1_upper/N above 0.1 wherever the true c1/N is (d = 16, τ = 0.05, N = 2,048: truth 0.12–0.19, the
# pool's own c1 0.055–0.07) and under it where the truth is 0.07 or less (d = 8, τ = 0.1, N = 200).
C1_GROWTH_RATIO_CAP = 0.75
C1_NO_CONVERGENCE_FACTOR = 10.0


@dataclass(frozen=True)
class FinitePool:
    """What the finite pool itself contributes to the plug-in CE∞ (one pass over the similarity matrix).

    - `c1` (n,): per-anchor c1(a) = ½ Var(e^{s/τ})/μ(a)² over the whole pool, as `first_order_terms`;
    - `c1_half`, `c1_quarter` (n,): the same over random halves and quarters of the pool (averaged over the
      parts and splits). c1 estimated from m documents is biased low, and with a heavy-tailed e^{s/τ} it
      keeps growing with m long after N: the pool has not sampled the tail that makes c1 (uniform sphere,
      d = 16, τ = 0.05, N = 2,048: 0.07·N from the pool, 0.19·N in truth). `c1_upper` extrapolates;
    - `influence` (N,): g_j, the first-order effect of pool document j on mean_a log μ̂(a):
      log μ̂_w(a) − log μ̂(a) ≈ (1/N_a) Σ_{j allowed for a} (w_j − 1)(e_aj/μ̂(a) − 1) for pool weights w, so
      mean_a log μ̂_w = mean_a log μ̂ + Σ_j (w_j − 1) g_j,  g_j = (1/n) Σ_a [j allowed for a] (e_aj/μ̂(a) − 1)/N_a.
      Resampling the pool (w multinomial) then moves CE∞ by Σ_j (w_j − 1) g_j, with variance Σ_j (g_j − ḡ)²
      (bootstrap.pool_bootstrap). On a uniform sphere g_j ≈ 0 for every document (each weighs equally on
      the anchors in total); in a clustered corpus a document in a dense cluster weighs on many anchors' μ
      at once, and this term does not average out over anchors.
    """

    c1: np.ndarray
    c1_half: np.ndarray
    c1_quarter: np.ndarray
    influence: np.ndarray

    def c1_upper(self) -> float:
        """An upper estimate of the mean c1 beyond this pool: the pool's own mean c1 plus the growth still to
        come, extrapolated from its growth over the last two doublings of the pool (D = c1(N) − c1(N/2),
        r = D / (c1(N/2) − c1(N/4))): D·r/(1 − r) with r capped at C1_GROWTH_RATIO_CAP, or
        C1_NO_CONVERGENCE_FACTOR·D when r ≥ 1. A light tail gives D ≈ 0 and r ≈ ½ (c1's bias is O(1/m)), so
        c1_upper ≈ c1.
        """
        full, half, quarter = (float(x.mean()) for x in (self.c1, self.c1_half, self.c1_quarter))
        grow, before = full - half, half - quarter
        if grow <= 0:
            return full
        if before <= 0 or grow >= before:
            return full + C1_NO_CONVERGENCE_FACTOR * grow
        r = min(grow / before, C1_GROWTH_RATIO_CAP)
        return full + grow * r / (1.0 - r)


def finite_pool_terms(
    sim: np.ndarray, exclude: np.ndarray, tau: float, rng: np.random.Generator, n_splits: int = 4
) -> FinitePool:
    """c1 over the pool, its halves and quarters, and each pool document's influence (`FinitePool`)."""
    n, n_pool = sim.shape
    parts = []
    for _ in range(n_splits):
        perm = rng.permutation(n_pool)
        for n_parts in (2, 4):
            for chunk in np.array_split(perm, n_parts):
                mask = np.zeros(n_pool)
                mask[chunk] = 1.0
                parts.append(mask)
    masks = np.stack(parts)  # (6·splits, N): per split 2 halves then 4 quarters
    is_half = np.tile(np.r_[np.ones(2, dtype=bool), np.zeros(4, dtype=bool)], n_splits)
    c1, c1_half, c1_quarter = np.empty(n), np.empty(n), np.empty(n)
    influence = np.zeros(n_pool)
    step = max(1, _CHUNK_ELEMENTS // max(n_pool, 1))
    for start in range(0, n, step):
        rows = np.arange(start, min(start + step, n))
        logits = np.asarray(sim[rows], dtype=np.float64) / tau  # (m, N)
        ex = exclude[rows]  # (m, P)
        r, c = np.nonzero(ex >= 0)
        logits[r, ex[r, c]] = -np.inf
        top = logits.max(axis=1, keepdims=True)  # (m, 1)
        e = np.exp(logits - top)  # (m, N), 0 on excluded columns
        allowed = np.isfinite(logits).astype(np.float64)  # (m, N)
        cnt = allowed.sum(axis=1)  # (m,)
        m1 = e.sum(axis=1) / cnt  # (m,) μ̂ up to e^{top}
        m2 = (e * e).sum(axis=1) / cnt
        c1[rows] = 0.5 * (m2 / m1**2 - 1.0)
        p_cnt = np.maximum(allowed @ masks.T, 1.0)  # (m, parts) allowed documents in each part
        p_m1 = (e @ masks.T) / p_cnt  # (m, parts)
        p_m2 = ((e * e) @ masks.T) / p_cnt
        with np.errstate(divide="ignore", invalid="ignore"):
            p_c1 = np.where(p_m1 > 0, 0.5 * (p_m2 / p_m1**2 - 1.0), np.nan)  # (m, parts)
        c1_half[rows] = np.nanmean(p_c1[:, is_half], axis=1)
        c1_quarter[rows] = np.nanmean(p_c1[:, ~is_half], axis=1)
        influence += ((e / m1[:, None] - allowed) / cnt[:, None]).sum(axis=0)  # (N,)
    return FinitePool(c1=c1, c1_half=c1_half, c1_quarter=c1_quarter, influence=influence / n)


def power_of_two_grid(k_max: int) -> list[int]:
    """[1, 2, 4, …, 2^⌊log2 k_max⌋]."""
    return [2**e for e in range(int(math.log2(max(k_max, 1))) + 1)]
