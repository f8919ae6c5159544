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


def power_of_two_grid(k_max: int) -> list[int]:
    """[1, 2, 4, …, 2^⌊log2 k_max⌋]."""
    return [2**e for e in range(int(math.log2(max(k_max, 1))) + 1)]
