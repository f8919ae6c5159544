"""The report schema: kinds are distinct and strict, and schema-1 reports (older bundles) load relabelled."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract.bundles.report_schema import (
    SCHEMA_VERSION,
    Bound,
    Estimate,
    GapReport,
    InverseKFit,
    KSufficient,
    ModelIdentity,
    NotComputable,
    RiskAtK,
    Term,
    TheoryTerms,
)

EST = Estimate(value=0.1, ci_low=0.05, ci_high=0.15, method="test")
BOUND = Bound(value=1.0, assumptions="test")


def _report(accepted: bool = False) -> GapReport:
    return GapReport(
        model=ModelIdentity(path="", name="m", metric="cosine", temperature=0.05, temperature_effective=0.05),
        k=31,
        k_rule="test",
        negative_sampler="test",
        n_train=12,
        n_test=11,
        n_train_queries=10,
        n_test_queries=10,
        n_train_split_queries=500,
        pool_size=300,
        seed=0,
        n_bootstrap=100,
        risk_train=EST,
        risk_test=EST,
        gap=EST,
        hoeffding_halfwidth=BOUND,
        k_grid_rule="test",
        risk_vs_k=[RiskAtK(k=1, risk=EST, delta=EST)],
        fit=InverseKFit(a=0.1, b=1.0, r2=0.9, k_range=(1, 32), n_points=3, accepted=accepted, rule="test"),
        ce_inf_plugin=EST,
        ce_inf_corrected=NotComputable(name="ce_inf_corrected", reason="test"),
        ce_inf_fit=EST if accepted else NotComputable(name="ce_inf_fit", reason="test"),
        k_sufficient=KSufficient(k=None, reason="test"),
        theory_terms=TheoryTerms(
            vacuous_threshold=3.47,
            sample_variability=Term(value=5.0, assumptions="test", vacuous=True),
            finite_k_log=BOUND,
            prop1_upper=BOUND,
            not_computable=[],
        ),
        mi_sampler="test",
        mi_lower_bound_k=EST,
        mi_cap_log_k_plus_1=BOUND,
        mi_cap_two_over_tau=BOUND,
        mi_lower_bound_inf=NotComputable(name="mi_lower_bound_inf", reason="test"),
    )


def test_kinds_round_trip_through_json_and_are_not_interchangeable():
    report = _report()
    again = GapReport.model_validate_json(report.model_dump_json())
    assert again == report
    body = report.model_dump(mode="json")
    assert body["theory_terms"]["sample_variability"]["kind"] == "term"
    assert body["ce_inf_fit"]["kind"] == "not_computable"
    assert body["schema_version"] == SCHEMA_VERSION == "2"
    # a Term is not a Bound: serving sample variability as a bound is refused
    body["theory_terms"]["sample_variability"]["kind"] = "bound"
    with pytest.raises(ValidationError):
        GapReport.model_validate(body)
    # an estimate without an interval is refused where an Estimate | NotComputable is expected
    body = report.model_dump(mode="json")
    body["ce_inf_fit"] = {"kind": "estimate", "value": 1.0}
    with pytest.raises(ValidationError):
        GapReport.model_validate(body)


def _as_v1(report: GapReport) -> dict:
    body = report.model_dump(mode="json")
    body["schema_version"] = "1"
    for name in ("n_train_split_queries", "k_grid_rule", "ce_inf_corrected", "mi_sampler"):
        del body[name]
    body["theory_terms"]["sample_variability"]["kind"] = "bound"
    body["ce_inf_fit"] = EST.model_dump(mode="json")  # schema 1 served the rejected fit's intercept
    body["mi_lower_bound_inf"] = EST.model_dump(mode="json")
    for field in ("ci_low", "ci_high", "level", "method"):
        del body["k_sufficient"][field]
    return body


@pytest.mark.parametrize("accepted", [False, True])
def test_schema_1_reports_load_without_the_claims_schema_1_got_wrong(accepted):
    upgraded = GapReport.model_validate(_as_v1(_report(accepted)))
    assert upgraded.schema_version == SCHEMA_VERSION
    assert isinstance(upgraded.theory_terms.sample_variability, Term)
    assert "anchors" in upgraded.theory_terms.sample_variability.assumptions
    # the MI figures were drawn under the corpus sampler: not bounds, so not served as numbers
    assert isinstance(upgraded.mi_lower_bound_k, NotComputable)
    assert isinstance(upgraded.mi_lower_bound_inf, NotComputable)
    assert "regenerate" in upgraded.mi_lower_bound_k.reason
    assert isinstance(upgraded.ce_inf_fit, Estimate) == accepted
    assert isinstance(upgraded.ce_inf_corrected, NotComputable)
    assert upgraded.n_train_split_queries == 10
    assert upgraded.risk_test == EST  # what schema 1 got right is kept
