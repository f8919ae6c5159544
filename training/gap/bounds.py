"""Closed-form terms of the P1 bounds (Whiteley 2026, arXiv 2607.09405), Hoeffding, and the MI lower bound."""

from __future__ import annotations

import math


def hoeffding_halfwidth(tau: float, n: int, delta: float = 0.05) -> float:
    """(4/τ)·sqrt(log(2/δ)/(2n)): the loss has range ≤ 4/τ (P1 Lemma 5), so Hoeffding applies."""
    return (4.0 / tau) * math.sqrt(math.log(2.0 / delta) / (2.0 * n))


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
