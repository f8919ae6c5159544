"""Section (b) of the gap report: R̂(k) on held-out anchors versus k, the a + b/k fit, plug-in CE∞
(raw and corrected for the finite pool), Δ(k) = R̂(k) − CE∞ and k_sufficient with its bootstrap interval."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from contract.bundles.report_schema import Estimate, InverseKFit, KSufficient, NotComputable, RiskAtK
from training.gap import bootstrap, inverse_k_fit
from training.gap import estimators as est
from training.gap.anchors import Anchors
from training.gap.intervals import estimate_from_boot, widen
from training.gap.mutual_info import MAX_FIRST_ORDER

# The grid of R̂(k) stops at k = pool/K_POOL_FRACTION: P1's negatives are fresh draws from an unbounded
# population, and k draws with replacement from a pool of N documents repeat one with probability ≈ k/N per
# draw; past a small fraction of the pool R̂(k) describes this corpus's finite law, not the population's
# (bench/gap/gap_validation.py, "pool fraction" table).
K_POOL_FRACTION = 8


def k_grid(k_max: int, min_pool: int) -> tuple[list[int], str]:
    """Powers of two up to min(k_max, min_pool / K_POOL_FRACTION), and the rule that says so."""
    cap = max(1, min(k_max, min_pool // K_POOL_FRACTION))
    rule = (
        f"k = 1, 2, 4, … ≤ min(k_max = {k_max}, N/{K_POOL_FRACTION} = {min_pool // K_POOL_FRACTION}), N = "
        f"{min_pool} the smallest pool an anchor draws from: the theory needs pool ≫ k, and beyond a small "
        "fraction of the pool R̂(k) only describes this corpus"
    )
    return est.power_of_two_grid(cap), rule


@dataclass
class CurveSection:
    rows: list[RiskAtK]
    k_grid_rule: str
    fit: InverseKFit
    ce_inf_plugin: Estimate
    ce_inf_corrected: Estimate | NotComputable
    ce_inf_fit: Estimate | NotComputable
    d1: Estimate
    c1: Estimate
    k_sufficient: KSufficient
    notes: list[str] = field(default_factory=list)

    def report_fields(self) -> dict[str, Any]:
        """(b) risk versus k, the 1/k fit, CE∞ and k_sufficient, as GapReport fields."""
        return {
            "k_grid_rule": self.k_grid_rule,
            "risk_vs_k": self.rows,
            "fit": self.fit,
            "ce_inf_plugin": self.ce_inf_plugin,
            "ce_inf_corrected": self.ce_inf_corrected,
            "ce_inf_fit": self.ce_inf_fit,
            "first_order_d1": self.d1,
            "first_order_c1": self.c1,
            "k_sufficient": self.k_sufficient,
        }


def risk_vs_k_section(
    a: Anchors, tau: float, k_max: int, n_boot: int, level: float, eps: float, rng: np.random.Generator
) -> CurveSection:
    """(b): R̂(k) on held-out anchors over the capped grid, the a + b/k fit, plug-in CE∞ (raw and corrected
    for the finite pool), Δ(k) and k_sufficient with its bootstrap interval."""
    allowed = a.sim.shape[1] - (a.exclude >= 0).sum(axis=1)  # (n,) pool size each anchor draws from
    ks, grid_rule = k_grid(k_max, int(allowed.min()))
    curve, var_arr = _risk_per_k(a, tau, ks, rng)
    ce_terms = est.plugin_ce_inf_terms(a.sim, a.pos, a.exclude, tau)  # (n_anchors,)
    d1, c1 = est.first_order_terms(a.sim, a.pos, a.exclude, tau)
    bias = c1 / allowed  # (n,) first-order Jensen bias of log μ̂ over a pool of N: E log μ̂ ≈ log μ − c1/N
    pool = est.finite_pool_terms(a.sim, a.exclude, tau, rng)
    # one set of bootstrap replicates for every column keeps Δ(k) = R(k) − CE∞ jointly resampled
    cols = np.column_stack([curve, ce_terms, ce_terms + bias, d1, c1])  # (n_anchors, n_k + 4)
    boot = bootstrap.bootstrap_means(cols, n_boot, rng, a.groups)  # (B, n_k + 4)
    point = cols.mean(axis=0)
    n_k = len(ks)
    r, ce = point[:n_k], float(point[n_k])
    b_r, b_ce = boot[:, :n_k], boot[:, n_k]
    method = f"bootstrap percentile over held-out queries ({n_boot} resamples)"

    rows = [
        RiskAtK(
            k=k,
            risk=estimate_from_boot(float(r[i]), b_r[:, i], level, method),
            delta=estimate_from_boot(float(r[i] - ce), b_r[:, i] - b_ce, level, method),
        )
        for i, k in enumerate(ks)
    ]
    d1_hat, c1_hat = float(point[-2]), float(point[-1])
    fit, ce_fit, notes = _inverse_k_fit(ks, r, var_arr, b_r, d1_hat, c1_hat, level, method)
    mean_bias = float(bias.mean())
    return CurveSection(
        rows=rows,
        k_grid_rule=grid_rule,
        fit=fit,
        ce_inf_plugin=estimate_from_boot(
            ce,
            b_ce,
            level,
            f"E[−s⁺/τ] + E log μ(a), μ = mean of e^{{s/τ}} over the pool (the corpus is the population, so "
            f"the interval is conditional on it and resamples the anchors only); {method}",
        ),
        ce_inf_corrected=_corrected_ce_inf(
            float(point[n_k + 1]),
            boot[:, n_k + 1] + bootstrap.pool_bootstrap(pool.influence, n_boot, rng),
            mean_bias,
            pool.c1_upper() / float(np.mean(allowed)),
            level,
            method,
        ),
        ce_inf_fit=ce_fit,
        d1=estimate_from_boot(d1_hat, boot[:, -2], level, f"E[e^{{s⁺/τ}}/μ(a)]; {method}"),
        c1=estimate_from_boot(c1_hat, boot[:, -1], level, f"½ E[Var(e^{{s/τ}})/μ(a)²]; {method}"),
        k_sufficient=_k_sufficient(ks, r - ce, b_r - b_ce[:, None], eps, level, method),
        notes=notes,
    )


def _risk_per_k(
    a: Anchors, tau: float, ks: list[int], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per-anchor R̂(k) (n_anchors, n_k) and Var_neg[R̂(k)] (n_k,), one fresh negative draw per k."""
    per_k, var = [], []
    for k in tqdm(ks, desc="risk vs k", leave=False):
        col, v = est.risk_curve(a.sim, a.pos, a.exclude, [k], tau, rng)
        per_k.append(col[:, 0])
        var.append(v[0])
    return np.stack(per_k, axis=1), np.asarray(var)


def _inverse_k_fit(
    ks: list[int],
    r: np.ndarray,
    var_arr: np.ndarray,
    b_r: np.ndarray,
    d1_hat: float,
    c1_hat: float,
    level: float,
    method: str,
) -> tuple[InverseKFit, Estimate | NotComputable, list[str]]:
    """The a + b/k fit, its intercept as a CE∞ estimate when accepted, and the note when not."""
    f = inverse_k_fit.fit_inverse_k(ks, r, var_arr, k_floor=d1_hat)
    fit = InverseKFit(
        a=f.a,
        b=f.b,
        r2=f.r2,
        k_range=(f.k_min, f.k_max),
        n_points=f.n_points,
        accepted=f.accepted,
        rule=f.rule,
        b_predicted=d1_hat - c1_hat,
    )
    if f.accepted:
        a_boot = inverse_k_fit.bootstrap_fit_intercepts(b_r, ks, var_arr, f.k_min)
        return fit, estimate_from_boot(f.a, a_boot, level, f"intercept of the WLS a + b/k fit; {method}"), []
    ce_fit = NotComputable(
        name="ce_inf_fit",
        reason=f"R̂(k) is not in the 1/k regime up to k_max = {ks[-1]} (no grid range passed the linearity "
        f"rule; the regime needs k ≫ d1 ≈ {d1_hat:.3g}): an intercept extrapolated from outside it is no "
        "estimate of CE∞; use ce_inf_plugin",
    )
    return fit, ce_fit, [f"the a + b/k fit is not accepted up to k = {ks[-1]}; ce_inf_fit is not computable"]


def _corrected_ce_inf(
    value: float, boot: np.ndarray, mean_bias: float, bias_upper: float, level: float, method: str
) -> Estimate | NotComputable:
    """Plug-in CE∞ + the first-order finite-pool correction, widened by half the correction each way.

    `boot`: two-way replicates (anchors × pool, bootstrap.pool_bootstrap): the target is the population
    beyond this corpus, so the corpus is itself a sample and its own variability belongs in the interval.
    Served only when an upper estimate of c1/N (`bias_upper`, FinitePool.c1_upper: the pool's own c1 plus
    the growth it still shows between half and whole pool) is at most MAX_FIRST_ORDER: the pool's c1
    understates the truth exactly where the correction is large (uniform sphere, d = 16, τ = 0.05,
    N = 2,048: the pool says 0.07, the truth is 0.19, the upper estimate 0.24–0.29; bench/gap/gap_validation.py,
    table 8).
    """
    if max(mean_bias, bias_upper) > MAX_FIRST_ORDER:
        return NotComputable(
            name="ce_inf_corrected",
            reason=f"first-order finite-pool bias c1/N = {mean_bias:.3g} nats from the pool, up to "
            f"{bias_upper:.3g} once c1's growth with the pool size is extrapolated, exceeds the "
            f"{MAX_FIRST_ORDER} nats a first-order correction can be trusted for (e^{{s/τ}} is too heavy-tailed "
            "over this pool); ce_inf_plugin holds for negatives drawn from this corpus",
        )
    return widen(
        estimate_from_boot(
            value,
            boot,
            level,
            f"ce_inf_plugin + c1(a)/N per anchor (mean {mean_bias:.3g} nats, upper estimate {bias_upper:.3g}: "
            f"E log μ̂ ≈ log μ − c1/N); the interval resamples the anchors (with the correction) and the pool "
            f"(to first order: each document's influence on mean log μ̂); {method}",
        ),
        low=0.5 * mean_bias,
        high=0.5 * mean_bias,
    )


def _k_sufficient(
    ks: list[int], delta: np.ndarray, boot_delta: np.ndarray, eps: float, level: float, method: str
) -> KSufficient:
    """The smallest grid k past which |Δ(k)| < eps, with the same rule on each bootstrap replicate of Δ."""
    k_suff = inverse_k_fit.k_sufficient(ks, delta, eps)
    k_lo, k_hi = inverse_k_fit.k_sufficient_interval(ks, boot_delta, eps, level)
    return KSufficient(
        eps=eps,
        k=k_suff,
        ci_low=k_lo,
        ci_high=k_hi,
        level=level,
        method=f"point value on the grid; interval: the same rule on each bootstrap replicate of Δ(k) "
        f"({method}), null = not reached within the grid",
        reason=None
        if k_suff is not None
        else f"|Δ(k)| ≥ {eps} nats somewhere in k ≤ {ks[-1]} (Δ({ks[-1]}) = {delta[-1]:.3g}): "
        "more negatives than the grid covers would still change the risk",
    )
