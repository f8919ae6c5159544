"""Oracle tests of the gap estimators: brute-force loops and closed forms on tiny hand-built matrices."""

from __future__ import annotations

import math

import numpy as np
import pytest

from training.gap import bootstrap, bounds, inverse_k_fit
from training.gap import estimators as est


def _brute_risk(pos: float, neg: list[float], tau: float) -> float:
    return math.log(1.0 + sum(math.exp((s - pos) / tau) for s in neg)) - math.log(len(neg))


def test_infonce_risk_matches_a_loop():
    rng = np.random.default_rng(1)
    pos = rng.uniform(-1, 1, 5)
    neg = rng.uniform(-1, 1, (5, 7))
    got = est.infonce_risk(pos, neg, 0.1)
    want = [_brute_risk(pos[i], list(neg[i]), 0.1) for i in range(5)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_infonce_risk_is_stable_at_tiny_temperature():
    # (s - s+)/τ = 2000: a naive exp overflows; the stable form gives 2000 − log 1 exactly
    got = est.infonce_risk(np.array([-1.0]), np.array([[1.0]]), 0.001)
    assert got[0] == pytest.approx(2000.0, rel=1e-12)


def test_sample_negatives_never_draws_an_excluded_column_and_is_uniform():
    rng = np.random.default_rng(0)
    exclude = est.pad_exclusions([[0, 3], [5], [], [9, 1, 4]], n_pool=10)
    cols = est.sample_negatives(10, 20_000, exclude, rng)  # (4, 20000)
    for i, ex in enumerate([[0, 3], [5], [], [9, 1, 4]]):
        allowed = sorted(set(range(10)) - set(ex))
        counts = np.bincount(cols[i], minlength=10)
        assert counts[ex].sum() == 0
        expected = 20_000 / len(allowed)
        # binomial sd ≈ sqrt(20000·p) ≈ 50: 6 sd either side
        assert np.all(np.abs(counts[allowed] - expected) < 6 * math.sqrt(expected))


def test_pad_exclusions_rejects_columns_outside_the_pool():
    with pytest.raises(ValueError, match="outside the pool"):
        est.pad_exclusions([[10]], n_pool=10)


def test_risk_with_random_negatives_equals_brute_force_on_the_same_draws():
    rng = np.random.default_rng(3)
    sim = rng.uniform(-1, 1, (4, 12))
    exclude = est.pad_exclusions([[0], [1, 2], [11], []], 12)
    pos = sim[np.arange(4), [0, 1, 11, 5]]
    got = est.risk_with_random_negatives(sim, pos, exclude, 6, 0.2, np.random.default_rng(9))
    cols = est.sample_negatives(12, 6, exclude, np.random.default_rng(9))
    want = [_brute_risk(pos[i], [sim[i, c] for c in cols[i]], 0.2) for i in range(4)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_plugin_ce_inf_equals_a_direct_mean_over_the_pool():
    rng = np.random.default_rng(4)
    sim = rng.uniform(-1, 1, (3, 8))
    ex_lists = [[2], [0, 7], []]
    pos = np.array([sim[0, 2], sim[1, 0], 0.9])
    got = est.plugin_ce_inf_terms(sim, pos, est.pad_exclusions(ex_lists, 8), 0.3)
    for i, ex in enumerate(ex_lists):
        mu = np.mean([math.exp(sim[i, j] / 0.3) for j in range(8) if j not in ex])
        assert got[i] == pytest.approx(-pos[i] / 0.3 + math.log(mu), rel=1e-12)


def test_first_order_terms_equal_their_definitions():
    rng = np.random.default_rng(5)
    sim = rng.uniform(-1, 1, (2, 6))
    pos = np.array([0.5, 0.1])
    d1, c1 = est.first_order_terms(sim, pos, est.pad_exclusions([[], [3]], 6), 0.5)
    for i, ex in enumerate([[], [3]]):
        vals = np.array([math.exp(sim[i, j] / 0.5) for j in range(6) if j not in ex])
        assert d1[i] == pytest.approx(math.exp(pos[i] / 0.5) / vals.mean(), rel=1e-12)
        assert c1[i] == pytest.approx(0.5 * vals.var() / vals.mean() ** 2, rel=1e-9)


@pytest.mark.parametrize(
    ("tau", "value"), [(0.05, 33.1), (0.1, 13.1), (0.2, 3.1), (0.5, 0.052), (1.0, 0.0072)]
)
def test_finite_k_log_term_matches_the_theory_table(tau, value):
    got = bounds.finite_k_log_term(tau, 1023)
    assert got == pytest.approx(math.log(1 + math.exp(2 / tau) / 1023))
    assert got == pytest.approx(value, rel=0.02)


def test_bound_terms_closed_forms_and_vacuous_flags():
    assert bounds.sample_variability_term(0.05, 10_000) == pytest.approx(3.26, abs=0.01)
    assert bounds.sample_variability_term(0.5, 1_000_000) == pytest.approx(0.033, abs=0.001)
    assert bounds.prop1_upper_term(0.5, 1023) == pytest.approx((math.e**4 - 1) ** 2 / (8 * 1023))
    assert bounds.prop1_upper_term(0.5, 1023) == pytest.approx(0.35, abs=0.01)
    assert bounds.prop1_upper_term(0.001, 10) == 1e300  # beyond float range: capped, and vacuous
    assert bounds.hoeffding_halfwidth(0.05, 300) == pytest.approx(80 * math.sqrt(math.log(40) / 600))
    k = 31
    assert bounds.is_vacuous(math.log(32) + 1e-9, k)
    assert not bounds.is_vacuous(math.log(32) - 1e-9, k)
    assert bounds.is_vacuous(bounds.finite_k_log_term(0.05, k), k)
    assert not bounds.is_vacuous(bounds.finite_k_log_term(1.0, k), k)


def test_mi_lower_bound_is_log_k_plus_1_minus_the_infonce_loss():
    # R̂ = mean l_NCE − log k, so log(1 + 1/k) − R̂ = log(k+1) − mean l_NCE
    assert bounds.mi_lower_bound(1.0 - math.log(7), 7) == pytest.approx(math.log(8) - 1.0)


def test_wls_recovers_an_exact_a_plus_b_over_k():
    ks = np.array([2, 4, 8, 16, 32])
    a, b, r2 = inverse_k_fit.wls_inverse_k(ks, -1.5 + 3.0 / ks, np.ones(5))
    assert (a, b, r2) == (pytest.approx(-1.5), pytest.approx(3.0), pytest.approx(1.0))


def test_fit_range_rule_drops_the_curved_small_k_points():
    ks = est.power_of_two_grid(1024)
    # a + b/k plus a 1/k² curvature that is far above the noise for k < 32 only
    r = -1.0 + 2.0 / np.array(ks) + 8.0 / np.array(ks, dtype=float) ** 2
    var = np.full(len(ks), 1e-6)
    fit = inverse_k_fit.fit_inverse_k(ks, r, var)
    assert fit.accepted
    assert 16 <= fit.k_min <= 128
    assert fit.a == pytest.approx(-1.0, abs=2e-3)
    assert fit.r2 > 0.99


def test_fit_without_a_linear_range_is_flagged():
    ks = est.power_of_two_grid(64)
    r = -np.log(np.array(ks, dtype=float))  # the −log k regime: never linear in 1/k
    fit = inverse_k_fit.fit_inverse_k(ks, r, np.full(len(ks), 1e-8))
    assert not fit.accepted
    assert (fit.k_min, fit.k_max, fit.n_points) == (16, 64, 3)


def test_bootstrap_fit_intercepts_equal_refits():
    rng = np.random.default_rng(2)
    ks = [4, 8, 16, 32]
    var = rng.uniform(0.5, 2.0, 4)
    curves = rng.normal(size=(5, 4))
    got = inverse_k_fit.bootstrap_fit_intercepts(curves, ks, var, k_min=8)
    for row, a in zip(curves, got, strict=True):
        assert a == pytest.approx(inverse_k_fit.wls_inverse_k(np.array(ks[1:]), row[1:], 1 / var[1:])[0])


def test_k_sufficient_needs_every_larger_k_below_eps():
    ks = [1, 2, 4, 8, 16]
    assert inverse_k_fit.k_sufficient(ks, np.array([0.5, 0.005, 0.02, 0.009, -0.001]), 0.01) == 8
    assert inverse_k_fit.k_sufficient(ks, np.array([0.5, 0.3, 0.2, 0.1, 0.05]), 0.01) is None


def test_bootstrap_means_with_groups_is_a_ratio_of_resampled_sums():
    rng = np.random.default_rng(0)
    values = np.array([1.0, 3.0, 10.0])
    groups = np.array([0, 0, 1])  # query 0 has two anchors
    boot = bootstrap.bootstrap_means(values, 4000, rng, groups)
    # each replicate resamples 2 groups: {0,0} -> 2, {1,1} -> 10, {0,1} -> (1+3+10)/3
    assert set(np.round(boot, 9)) <= {2.0, 10.0, round(14 / 3, 9)}
    assert np.mean(boot == 2.0) == pytest.approx(0.25, abs=0.03)


def test_bootstrap_standard_error_matches_the_closed_form():
    rng = np.random.default_rng(1)
    values = rng.normal(size=400)
    boot = bootstrap.bootstrap_means(values, 4000, rng)
    assert boot.std() == pytest.approx(values.std() / math.sqrt(400), rel=0.08)


def test_gap_ci_orders_and_contains_the_point_estimate():
    rng = np.random.default_rng(7)
    g = bootstrap.gap_with_ci(rng.normal(0, 1, 300), rng.normal(0.5, 1, 300), n_boot=1000, rng=rng)
    assert g.gap == pytest.approx(g.test - g.train)
    assert g.gap_ci[0] <= g.gap <= g.gap_ci[1]
    assert g.train_ci[0] <= g.train <= g.train_ci[1]


def test_k_sufficient_interval_applies_the_rule_to_each_replicate():
    ks = [1, 2, 4, 8]
    boot = np.array(
        [
            [0.5, 0.005, 0.005, 0.001],  # settles at 2
            [0.5, 0.3, 0.005, 0.001],  # settles at 4
            [0.5, 0.3, 0.2, 0.02],  # never within the grid
        ]
    )
    assert inverse_k_fit.k_sufficient_interval(ks, boot[:2], 0.01, level=0.5) == (2, 4)
    assert inverse_k_fit.k_sufficient_interval(ks, boot, 0.01, level=0.99) == (
        2,
        None,
    )  # None: beyond the grid
    assert inverse_k_fit.k_sufficient_interval(ks, boot[[2, 2]], 0.01) == (None, None)


def test_fit_ranges_never_start_below_the_k_floor():
    ks = est.power_of_two_grid(1024)
    r = -1.5 + 3.0 / np.array(ks, dtype=float)  # exactly linear in 1/k from k = 1
    assert inverse_k_fit.fit_inverse_k(ks, r, np.full(len(ks), 1e-6)).k_min == 2
    fit = inverse_k_fit.fit_inverse_k(ks, r, np.full(len(ks), 1e-6), k_floor=100)  # e.g. d1 ≈ 100
    assert fit.accepted and fit.k_min == 128
    late = inverse_k_fit.fit_inverse_k(
        ks, r, np.full(len(ks), 1e-6), k_floor=600
    )  # one grid point left above d1
    assert not late.accepted


def test_cluster_standard_error_closed_forms():
    rng = np.random.default_rng(11)
    x = rng.exponential(size=50)
    # one anchor per group: s/√n with the n − 1 denominator
    assert bootstrap.mean_se(x) == pytest.approx(x.std(ddof=1) / math.sqrt(50))
    # groups: the ratio estimator's linearised standard error, by hand
    groups = np.sort(np.r_[np.arange(20), rng.integers(0, 20, 30)])  # 20 groups of 1 to ~6 anchors
    sums = np.array([x[groups == g].sum() for g in range(20)])
    sizes = np.array([(groups == g).sum() for g in range(20)])
    m = sums.sum() / sizes.sum()
    by_hand = math.sqrt(20 / 19 * ((sums - m * sizes) ** 2).sum()) / sizes.sum()
    assert bootstrap.mean_se(x, groups) == pytest.approx(by_hand)
    # each replicate's se is the same formula on its resample: replicate 0 rebuilt from its copies
    means, ses = bootstrap.bootstrap_means_and_ses(x, 3, np.random.default_rng(12), groups)
    counts = np.random.default_rng(12).multinomial(20, np.full(20, 1 / 20), size=3)[0]
    idx = np.concatenate([np.flatnonzero(groups == g) for g in range(20) for _ in range(counts[g])])
    copy_groups = np.concatenate([np.full((groups == g).sum(), j) for j, g in enumerate(
        g for g in range(20) for _ in range(counts[g]))])  # fmt: skip
    assert means[0] == pytest.approx(x[idx].mean())
    assert ses[0] == pytest.approx(bootstrap.mean_se(x[idx], copy_groups))
    # the same resamples as bootstrap_means
    np.testing.assert_allclose(means, bootstrap.bootstrap_means(x, 3, np.random.default_rng(12), groups))


def test_studentized_interval_covers_the_mean_of_a_skewed_law_where_the_percentile_one_misses_high():
    """Brute force against a known mean: lognormal(0, 1.2) (skewness ≈ 12, like per-anchor InfoNCE losses at
    τ = 0.05, whose skewness is 4–8), n = 150, 600 samples."""
    rng = np.random.default_rng(13)
    truth = math.exp(1.2**2 / 2)
    t_cov = p_cov = p_high = 0
    for _ in range(600):
        x = rng.lognormal(0.0, 1.2, 150)
        means, ses = bootstrap.bootstrap_means_and_ses(x, 1000, rng)
        lo, hi = bootstrap.studentized_ci(float(x.mean()), bootstrap.mean_se(x), means, ses)
        t_cov += lo <= truth <= hi
        plo, phi = bootstrap.percentile_ci(means)
        p_cov += plo <= truth <= phi
        p_high += phi < truth
    assert t_cov / 600 >= 0.92
    assert p_high / 600 > 0.05  # the percentile interval misses on the high side far more than 2.5 %
    assert t_cov > p_cov
