"""Validation on a synthetic world with known truth (training/experiments/gap_simulation.py): fast versions of the
studies in bench/gap/gap_validation.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from training.experiments.gap_simulation import SphereWorld, sample_uniform_cosine, true_risk
from training.gap import bootstrap, inverse_k_fit
from training.gap import estimators as est

WORLD = SphereWorld(dim=8, kappa=10.0, tau=0.5)


def test_closed_form_ce_inf_matches_a_huge_pool():
    rng = np.random.default_rng(0)
    pos, neg = WORLD.sample_sims(2000, 4000, rng)
    ce = np.mean(-pos / WORLD.tau) + np.mean(est.logsumexp_rows(neg / WORLD.tau) - math.log(4000))
    assert ce == pytest.approx(WORLD.ce_inf(), abs=0.01)
    # μ is the same for every anchor on the uniform sphere
    big = sample_uniform_cosine(WORLD.dim, (1_000_000,), rng)
    assert math.log(np.mean(np.exp(big / WORLD.tau))) == pytest.approx(WORLD.log_mu(), abs=2e-3)


def test_plugin_and_inverse_k_fit_land_within_5_percent_of_true_ce_inf():
    rng = np.random.default_rng(1)
    anchors, positives, pool = WORLD.sample_vectors(600, 4000, rng)
    sim = anchors @ pool.T  # (600, 4000): the real matrix-product path
    pos = (anchors * positives).sum(1)
    exclude = est.pad_exclusions([[] for _ in range(600)], 4000)
    truth = WORLD.ce_inf()

    plugin = est.plugin_ce_inf_terms(sim, pos, exclude, WORLD.tau).mean()
    assert abs(plugin - truth) < 0.05 * abs(truth)

    ks = est.power_of_two_grid(2048)
    per_anchor, var = est.risk_curve(sim, pos, exclude, ks, WORLD.tau, rng)
    fit = inverse_k_fit.fit_inverse_k(ks, per_anchor.mean(0), var)
    assert fit.accepted
    assert abs(fit.a - truth) < 0.05 * abs(truth)
    # the fitted slope agrees with the first-order coefficient d1 − c1 (Whiteley 2026, arXiv 2607.09405, second order)
    assert fit.b == pytest.approx(WORLD.first_order_b(), rel=0.25)


def test_delta_k_decays_at_rate_one_over_k():
    rng = np.random.default_rng(2)
    ks = [64, 128, 256, 512]
    n = 20_000
    deltas = []
    for k in ks:
        pos, neg = WORLD.sample_sims(n, k, rng)
        # R̂(k) − CE∞ with the anchors' own −s⁺/τ as control variate: only the negatives' noise is left
        deltas.append(np.mean(est.infonce_risk(pos, neg, WORLD.tau) + pos / WORLD.tau) - WORLD.log_mu())
    slope = np.polyfit(np.log(ks), np.log(deltas), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.1)
    assert deltas[-1] == pytest.approx(WORLD.first_order_b() / 512, rel=0.15)


def test_bootstrap_ci_of_the_gap_covers_the_true_gap():
    k, n, n_sims = 15, 200, 200
    train_world = SphereWorld(dim=8, kappa=14.0, tau=0.5)  # "memorised" pairs: tighter positives
    test_world = SphereWorld(dim=8, kappa=8.0, tau=0.5)
    rng = np.random.default_rng(3)
    true_gap = true_risk(test_world, k, rng, n=400_000)[0] - true_risk(train_world, k, rng, n=400_000)[0]

    l_train = train_world.risk_samples(n * n_sims, k, rng).reshape(n_sims, n)
    l_test = test_world.risk_samples(n * n_sims, k, rng).reshape(n_sims, n)
    covered = 0
    for s in range(n_sims):
        g = bootstrap.gap_with_ci(l_train[s], l_test[s], n_boot=600, rng=np.random.default_rng(100 + s))
        covered += g.gap_ci[0] <= true_gap <= g.gap_ci[1]
    assert true_gap > 0.1  # the scenario has a real gap to cover
    assert covered / n_sims >= 0.90


def _sphere_anchors(world: SphereWorld, n: int, n_pool: int, seed: int):
    """Anchors of the report's sections from the sphere world (every anchor its own query)."""
    from training.gap.anchors import Anchors

    anchors, positives, pool = world.sample_vectors(n, n_pool, np.random.default_rng(seed))
    return Anchors(
        sim=(anchors @ pool.T).astype(np.float32),  # (n, N): the real matrix-product path
        pos=(anchors * positives).sum(1),
        exclude=est.pad_exclusions([[] for _ in range(n)], n_pool),
        groups=np.arange(n),
        n_queries=n,
        pos_col=np.zeros(n, dtype=np.int64),
    )


@pytest.mark.parametrize(
    "world",
    [
        SphereWorld(dim=64, kappa=100.0, tau=0.05),  # the default τ: d1 ≈ 1.7e5, far beyond any grid k
        SphereWorld(dim=16, kappa=20.0, tau=0.05),  # d1 ≈ 800: R̂ can pass the linearity test below it
    ],
)
def test_a_rejected_fit_is_not_served_as_an_estimate_of_ce_inf(world):
    from contract.bundles.report_schema import Estimate, NotComputable
    from training.gap.risk_vs_k import risk_vs_k_section

    a = _sphere_anchors(world, 600, 4000, 0)
    curve = risk_vs_k_section(a, world.tau, 8192, 300, 0.95, 0.01, np.random.default_rng(1))
    assert not curve.fit.accepted
    assert abs(curve.fit.a - world.ce_inf()) > 0.05 * abs(world.ce_inf())  # the intercept is off
    assert isinstance(curve.ce_inf_fit, NotComputable) and "1/k regime" in curve.ce_inf_fit.reason
    # the plug-in still lands on the truth
    assert isinstance(curve.ce_inf_plugin, Estimate)
    assert curve.ce_inf_plugin.ci_low <= world.ce_inf() <= curve.ce_inf_plugin.ci_high


def test_accepted_fit_is_an_estimate_near_the_truth():
    from contract.bundles.report_schema import Estimate
    from training.gap.risk_vs_k import risk_vs_k_section

    a = _sphere_anchors(WORLD, 600, 4000, 2)
    curve = risk_vs_k_section(a, WORLD.tau, 8192, 300, 0.95, 0.01, np.random.default_rng(3))
    assert [r.k for r in curve.rows][-1] == 256  # capped at 4000 // 8 = 500, not 8192
    assert curve.fit.accepted and isinstance(curve.ce_inf_fit, Estimate)
    assert abs(curve.ce_inf_fit.value - WORLD.ce_inf()) < 0.05 * abs(WORLD.ce_inf())


def test_finite_pool_correction_restores_coverage_of_the_population_ce_inf():
    from contract.bundles.report_schema import Estimate, NotComputable
    from training.gap.risk_vs_k import risk_vs_k_section

    # a small pool: log μ̂ over N = 200 documents is biased by ≈ −c1/N = −14.1/200 ≈ −0.07 nats
    world = SphereWorld(dim=8, kappa=10.0, tau=0.1)
    a = _sphere_anchors(world, 8000, 200, 4)
    curve = risk_vs_k_section(a, world.tau, 8192, 400, 0.95, 0.01, np.random.default_rng(5))
    raw, corrected = curve.ce_inf_plugin, curve.ce_inf_corrected
    assert raw.ci_high < world.ce_inf()  # the plug-in's interval misses the population value
    assert isinstance(corrected, Estimate)
    assert corrected.ci_low <= world.ce_inf() <= corrected.ci_high
    # c1 is itself estimated from the pool (and underestimated with heavy tails): same order as the truth
    assert corrected.value - raw.value == pytest.approx(world.c1() / 200, rel=0.3)
    # a pool too small for first order: not computable rather than a wrong correction
    tiny = risk_vs_k_section(
        _sphere_anchors(world, 500, 50, 6), world.tau, 64, 100, 0.95, 0.01, np.random.default_rng(7)
    )
    assert isinstance(tiny.ce_inf_corrected, NotComputable)
