"""The generalization-gap report: one pydantic schema, written as report.json and served unchanged by the API.

Every number in the report is labelled. An `Estimate` is a point estimate with a confidence interval
and the method that produced it; a `Bound` is a guarantee that holds under the stated assumptions (with a
`vacuous` flag when it says nothing useful); a `NotComputable` names a term of the theory that cannot be
evaluated for this model, with the reason, instead of a made-up number. All risks, cross-entropies and
mutual-information figures are in nats (theory.md §3; Whiteley 2026, arXiv 2607.09405).

Field names are part of the public API (`GET /generalization-gap`): add fields, never rename them, and bump
`SCHEMA_VERSION` when a field's meaning changes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "1"
REPORT_FILE = "report.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Estimate(_Strict):
    """A point estimate with a `level` confidence interval [ci_low, ci_high]."""

    kind: Literal["estimate"] = "estimate"
    value: float
    ci_low: float
    ci_high: float
    level: float = 0.95
    method: str = Field(description="how the value and its interval were computed")


class Bound(_Strict):
    """A bound that holds under `assumptions`; `vacuous` says it is too loose to constrain anything."""

    kind: Literal["bound"] = "bound"
    value: float
    assumptions: str
    vacuous: bool = False


class NotComputable(_Strict):
    """A theory term that cannot be evaluated for this model; never replaced by a guess."""

    kind: Literal["not_computable"] = "not_computable"
    name: str
    reason: str


class LambdaSummary(_Strict):
    """Summary of the AnInfoNCE diagonal Λ (Rusak et al. 2024/25)."""

    min: float
    median: float
    max: float
    mean: float


class ModelIdentity(_Strict):
    path: str = Field(description="folder the model was loaded from ('' when built in memory)")
    name: str
    metric: Literal["cosine", "aninfonce"]
    temperature: float = Field(
        description="τ used in every risk: the InfoNCE temperature, or 1 for AnInfoNCE whose logits are "
        "the learned similarity itself"
    )
    temperature_effective: float = Field(
        description="τ that enters the P1 bound terms and the 2/τ cap: logits differ by at most 4/τ_eff. "
        "Equals temperature for cosine; 1/max(Λ) for AnInfoNCE"
    )
    lambda_summary: LambdaSummary | None = None


class RiskAtK(_Strict):
    k: int
    risk: Estimate = Field(description="R̂(k) on held-out anchors, P1 normalisation (InfoNCE − log k)")
    delta: Estimate = Field(description="Δ(k) = R̂(k) − CE∞ (plug-in); CI from the same anchor bootstrap")


class InverseKFit(_Strict):
    """Weighted least-squares fit R̂(k) ≈ a + b/k (P1 Proposition 1: R(k) = CE∞ + O(1/k))."""

    a: float
    b: float
    r2: float = Field(description="weighted R² of the fit on k_range")
    k_range: tuple[int, int]
    n_points: int
    accepted: bool = Field(description="false when no range passed the linearity rule; a is then unreliable")
    rule: str
    b_predicted: float | None = Field(
        None, description="first-order coefficient d1 − c1 (theory.md §3b), to compare with b"
    )


class KSufficient(_Strict):
    eps: float = Field(0.01, description="tolerance in nats")
    k: int | None = Field(description="smallest k of the grid with |Δ(k')| < eps for every k' ≥ k")
    reason: str | None = Field(None, description="why k is None")


class TheoryTerms(_Strict):
    """Computable terms of P1's bounds, each a `Bound` flagged vacuous when it exceeds log(k+1)."""

    vacuous_threshold: float = Field(description="log(k+1): the largest InfoNCE gain possible at this k")
    sample_variability: Bound
    finite_k_log: Bound
    prop1_upper: Bound
    not_computable: list[NotComputable]


class RetrievalMetrics(_Strict):
    n_queries: int
    ndcg_at_10: float
    recall_at_10: float
    mrr_at_10: float


class RetrievalComparison(_Strict):
    train: RetrievalMetrics = Field(description="metrics on a random sample of training queries")
    test: RetrievalMetrics
    ndcg_at_10_gap: Estimate = Field(description="train − test nDCG@10 (positive = worse on held-out)")


class ServedQueryEncoder(_Strict):
    """The query encoder the API serves, when it is not the model the report is about (a distilled one).

    Its held-out InfoNCE risk at the report's k and τ, queries from the served encoder against the full
    model's document vectors, and the paired difference to the full query encoder (same anchors, same
    negatives). Filled by the API from the bundle manifest (training/served_risk.py computes it)."""

    backend: str
    k: int
    temperature: float
    risk_test: Estimate | None = None
    delta_vs_full: Estimate | None = Field(None, description="risk(served) − risk(full query encoder)")
    note: str = ""


class GapReport(_Strict):
    """Estimated generalization gap of one encoder (theory.md §3 (a)–(d))."""

    schema_version: str = SCHEMA_VERSION
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    units: Literal["nats"] = "nats"
    model: ModelIdentity

    # the setting every number below refers to
    k: int = Field(description="negatives per anchor, the k of training")
    k_rule: str = Field(description="how k was derived from the training configuration")
    negative_sampler: str
    n_train: int = Field(description="training anchors, i.e. (query, relevant document) pairs")
    n_test: int = Field(description="held-out anchors")
    n_train_queries: int
    n_test_queries: int
    pool_size: int = Field(
        description="documents negatives are drawn from (an anchor's own positives excluded)"
    )
    seed: int
    delta: float = Field(0.05, description="failure probability of the bounds (confidence 1 − delta)")
    n_bootstrap: int

    # (a) empirical gap at the training k
    risk_train: Estimate
    risk_test: Estimate
    gap: Estimate = Field(description="R_test − R_train, bootstrap percentile CI")
    hoeffding_halfwidth: Bound = Field(description="|R_test − R(φ̂)| ≤ value with probability ≥ 1 − delta")

    # (b) risk versus k
    risk_vs_k: list[RiskAtK]
    fit: InverseKFit
    ce_inf_plugin: Estimate = Field(description="CE∞ = E[−s⁺/τ] + E log μ(a), μ over the whole pool")
    ce_inf_fit: Estimate = Field(description="the intercept a of the a + b/k fit, bootstrap CI")
    first_order_d1: Estimate | None = None
    first_order_c1: Estimate | None = None
    k_sufficient: KSufficient

    # (c) bound terms
    theory_terms: TheoryTerms

    # (d) mutual information (a lower bound, not an estimate of MI)
    mi_lower_bound_k: Estimate = Field(
        description="log(k+1) − L_InfoNCE on held-out anchors (van den Oord 2018)"
    )
    mi_cap_log_k_plus_1: Bound
    mi_cap_two_over_tau: Bound
    mi_lower_bound_inf: Estimate = Field(description="−CE∞, the uncapped k → ∞ bound")

    retrieval: RetrievalComparison | None = None
    plots: list[str] = Field(default_factory=list, description="PNG files beside report.json")
    notes: list[str] = Field(default_factory=list)
    served_query_encoder: ServedQueryEncoder | None = None
