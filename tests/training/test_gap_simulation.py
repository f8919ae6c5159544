"""Validation on a synthetic world with known truth (training/gap/simulate.py): fast versions of the
studies in bench/gap_validation.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from training.gap import estimators as est
from training.gap.simulate import SphereWorld, sample_uniform_cosine, true_risk

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
    fit = est.fit_inverse_k(ks, per_anchor.mean(0), var)
    assert fit.accepted
    assert abs(fit.a - truth) < 0.05 * abs(truth)
    # the fitted slope agrees with the first-order coefficient d1 − c1 (theory.md §3b)
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
        g = est.gap_with_ci(l_train[s], l_test[s], n_boot=600, rng=np.random.default_rng(100 + s))
        covered += g.gap_ci[0] <= true_gap <= g.gap_ci[1]
    assert true_gap > 0.1  # the scenario has a real gap to cover
    assert covered / n_sims >= 0.90
