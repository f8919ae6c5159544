"""Oracle tests of the MI lower bounds on a toy whose mutual information is known in closed form.

50 classes, each with 2 documents; a query of class c is relevant to both documents of c, and the ideal
encoder maps a query and the documents of its class to the same unit vector e_c, so s = 1 within a class
and 0 across. With classes drawn uniformly, I(query; relevant document) = H(class) = log 50 nats (the
document determines the class, and the class is all the query carries).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from contract.bundles.report_schema import Estimate, NotComputable
from training.gap import bounds
from training.gap import estimators as est
from training.gap.anchors import Anchors
from training.gap.mutual_info import MAX_FIRST_ORDER, marginal_infonce, marginal_terms, mi_section

N_CLASSES, DOCS_PER_CLASS, TAU, K = 50, 2, 0.05, 63
TRUE_MI = math.log(N_CLASSES)


def toy_anchors(n_queries: int, seed: int) -> Anchors:
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, N_CLASSES, n_queries)  # (Q,) i.i.d. uniform classes
    doc_cls = np.repeat(np.arange(N_CLASSES), DOCS_PER_CLASS)  # (N,)
    rows, cols, groups, exclude = [], [], [], []
    for q, c in enumerate(cls):
        relevant = list(np.flatnonzero(doc_cls == c))
        for col in relevant:
            rows.append(q)
            cols.append(col)
            groups.append(q)
            exclude.append(relevant)
    anchor_cls = cls[np.asarray(rows)]
    sim = (anchor_cls[:, None] == doc_cls[None, :]).astype(np.float32)  # (n, N): 1 within a class
    return Anchors(
        sim=sim,
        pos=np.ones(len(rows)),
        exclude=est.pad_exclusions(exclude, len(doc_cls)),
        groups=np.asarray(groups),
        n_queries=n_queries,
        pos_col=np.asarray(cols),
    )


def exact_infonce_mi(k: int, tau: float) -> float:
    """E[log(k+1) − l_NCE] with k i.i.d. marginal negatives: B ~ Binom(k, 1/50) of them share the class."""
    b = np.arange(k + 1)
    loss = np.log1p(b + (k - b) * math.exp(-1.0 / tau))
    return math.log(k + 1) - float((binom.pmf(b, k, 1.0 / N_CLASSES) * loss).sum())


def test_the_corpus_sampler_overstates_mi_which_is_why_the_report_does_not_use_it():
    a = toy_anchors(400, 0)
    # negatives uniform over the corpus minus the query's relevant documents: never the query's class
    minus_ce = -est.plugin_ce_inf_terms(a.sim, a.pos, a.exclude, TAU).mean()
    r = est.risk_with_random_negatives(a.sim, a.pos, a.exclude, K, TAU, np.random.default_rng(1)).mean()
    assert minus_ce == pytest.approx(1.0 / TAU)  # 20 nats ≫ log 50
    assert bounds.mi_lower_bound(r, K) == pytest.approx(math.log(K + 1), abs=1e-6)  # 4.159 > 3.912


def test_marginal_infonce_matches_the_closed_form_and_stays_below_the_true_mi():
    a = toy_anchors(1000, 2)
    terms = marginal_infonce(a, K, TAU, np.random.default_rng(3))
    truth = exact_infonce_mi(K, TAU)  # ≈ 3.46
    assert truth < TRUE_MI
    se = terms.std() / math.sqrt(1000)
    assert terms.mean() == pytest.approx(truth, abs=4 * se + 0.02)  # +0.02: draws without replacement


def test_marginal_plugin_is_corrected_to_the_true_mi():
    a = toy_anchors(1000, 4)
    ce, corr = marginal_terms(a, TAU)
    # μ̂ over other queries' positives: c1 = ½ Var(e^{s/τ})/μ² ≈ ½ (50 − 1), so c1/P ≈ 24.5/999
    assert corr.mean() == pytest.approx(24.5 / 999, rel=0.15)
    assert -(ce + corr).mean() == pytest.approx(TRUE_MI, abs=0.05)


def test_mi_section_serves_bounds_whose_intervals_cover_the_truth():
    a = toy_anchors(1000, 5)
    mi = mi_section(a, K, TAU, n_boot=500, level=0.95, rng=np.random.default_rng(6))
    assert isinstance(mi.mi_k, Estimate) and isinstance(mi.mi_inf, Estimate)
    assert mi.mi_k.ci_low <= exact_infonce_mi(K, TAU) <= mi.mi_k.ci_high
    assert mi.mi_k.ci_high < TRUE_MI  # a lower bound, clearly below the truth at k = 63
    assert mi.mi_inf.ci_low <= TRUE_MI <= mi.mi_inf.ci_high
    assert "marginal" in mi.mi_k.method


def test_mi_section_refuses_what_it_cannot_support():
    a = toy_anchors(40, 7)
    mi = mi_section(a, K, TAU, n_boot=100, level=0.95, rng=np.random.default_rng(8))
    # 63 i.i.d. marginal negatives need 63 other queries; with 39 the value is not computable
    assert isinstance(mi.mi_k, NotComputable) and "39" in mi.mi_k.reason
    # 39 other queries estimate μ with a bias c1/P ≈ 24.5/39 ≈ 0.63 nats: beyond first order
    assert isinstance(mi.mi_inf, NotComputable)
    assert f"{MAX_FIRST_ORDER}" in mi.mi_inf.reason


def test_row_blocks_give_the_same_terms_as_one_block(monkeypatch):
    a = toy_anchors(60, 9)
    whole = marginal_terms(a, TAU)
    monkeypatch.setattr(est, "_CHUNK_ELEMENTS", 500)  # blocks of a few rows
    blocked = marginal_terms(a, TAU)
    for x, y in zip(whole, blocked, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-12)
