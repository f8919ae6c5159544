"""Intervals of the gap report: a bootstrap Estimate, and widening one for a correction's own error."""

from __future__ import annotations

import numpy as np

from contract.bundles.report_schema import Estimate
from training.gap import bootstrap


def estimate_from_boot(value: float, boot: np.ndarray, level: float, method: str) -> Estimate:
    """An Estimate with the percentile CI of `boot`; widened (and said so) if it misses the point value,
    which a biased statistic such as a fit intercept can do."""
    lo, hi = bootstrap.percentile_ci(boot, level)
    if not lo <= value <= hi:
        method += "; interval widened to include the point estimate"
    return Estimate(value=value, ci_low=min(lo, value), ci_high=max(hi, value), level=level, method=method)


def estimate_from_interval(value: float, lo: float, hi: float, level: float, method: str) -> Estimate:
    """An Estimate with the interval [lo, hi], widened (and said so) if it misses the point value."""
    if not lo <= value <= hi:
        method += "; interval widened to include the point estimate"
    return Estimate(value=value, ci_low=min(lo, value), ci_high=max(hi, value), level=level, method=method)


def widen(e: Estimate, *, low: float = 0.0, high: float = 0.0) -> Estimate:
    """`e` with its interval widened for a first-order correction's own error, which can go either way:
    with heavy-tailed e^{s/τ} the true c1/N overstates the finite-pool bias by up to about half of it
    while c1/N ≤ MAX_FIRST_ORDER, and c1 estimated from the pool itself understates c1 (bench/gap/gap_validation.py,
    tables 4 and 5)."""
    return e.model_copy(
        update={
            "ci_low": e.ci_low - low,
            "ci_high": e.ci_high + high,
            "method": e.method + f"; widened by {max(low, high):.3g} nats for the correction's own error",
        }
    )
