"""Section (a) of the gap report: R_train, R_test and their gap at the training k (studentized bootstrap over
queries), the Hoeffding half-width of R_test, and a note when k is too large a share of the pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.bundles.report_schema import Bound, Estimate
from training.gap import bootstrap, bounds
from training.gap import estimators as est
from training.gap.anchors import Anchors
from training.gap.intervals import estimate_from_interval
from training.gap.risk_vs_k import K_POOL_FRACTION


@dataclass
class GapAtK:
    """(a): the risks and their gap at the training k, and the Hoeffding half-width."""

    n_train: int
    n_test: int
    risk_train: Estimate
    risk_test: Estimate
    gap: Estimate
    hoeffding: Bound

    def report_fields(self) -> dict[str, Any]:
        """As GapReport fields."""
        return {
            "n_train": self.n_train,
            "n_test": self.n_test,
            "risk_train": self.risk_train,
            "risk_test": self.risk_test,
            "gap": self.gap,
            "hoeffding_halfwidth": self.hoeffding,
        }


def gap_at_k_section(
    a_train: Anchors,
    a_test: Anchors,
    n_negatives: int,
    tau: float,
    tau_eff: float,
    delta: float,
    resampling: bootstrap.Resampling,
) -> GapAtK:
    """(a) R_train, R_test and their gap at the training k = n_negatives, bootstrap over queries; Hoeffding
    on R_test."""
    n_boot, level, rng = resampling.n_boot, resampling.level, resampling.rng
    l_train = est.risk_with_random_negatives(a_train.sim, a_train.pos, a_train.exclude, n_negatives, tau, rng)
    l_test = est.risk_with_random_negatives(a_test.sim, a_test.pos, a_test.exclude, n_negatives, tau, rng)
    g = bootstrap.gap_with_ci(
        l_train, l_test, n_boot=n_boot, level=level, rng=rng,
        groups_train=a_train.groups, groups_test=a_test.groups,
    )  # fmt: skip
    boot = (
        f"studentized bootstrap (bootstrap-t) over queries ({n_boot} resamples), k={n_negatives} random pool negatives "
        "per anchor: per-anchor losses are right-skewed, and the percentile interval missed the held-out "
        "mean on the optimistic side (bench/gap/predictive_validity.py)"
    )
    hw = bounds.hoeffding_halfwidth(tau_eff, a_test.n_queries, delta)
    return GapAtK(
        n_train=len(l_train),
        n_test=len(l_test),
        risk_train=estimate_from_interval(g.train, *g.train_ci, level, boot),
        risk_test=estimate_from_interval(g.test, *g.test_ci, level, boot),
        gap=estimate_from_interval(g.gap, *g.gap_ci, level, boot + "; splits resampled independently"),
        hoeffding=Bound(
            value=hw,
            assumptions=f"n = {a_test.n_queries} held-out queries (the i.i.d. unit: anchors of one query are "
            "dependent) that the model does not depend on; for the mean over queries of each query's mean "
            f"anchor loss, whose range is ≤ 4/τ (P1 Lemma 5); Hoeffding at confidence {1 - delta:g}",
            vacuous=bounds.is_vacuous(hw, n_negatives),
        ),
    )


def pool_notes(a_test: Anchors, n_pool: int, n_negatives: int) -> list[str]:
    """A note when the training k (n_negatives) is too large a share of the pool for 'an unbounded
    population'."""
    min_pool = int(n_pool - (a_test.exclude >= 0).sum(axis=1).max())
    if n_negatives <= min_pool // K_POOL_FRACTION:
        return []
    return [
        f"the training k = {n_negatives} exceeds 1/{K_POOL_FRACTION} of the pool ({min_pool} documents): risk_train, "
        "risk_test and gap describe negatives drawn from this corpus, with repeats, not from an unbounded "
        "population"
    ]
