"""The generalization-gap report: one pydantic schema, written as report.json and served unchanged by the API.

Every number in the report is labelled. An `Estimate` is a point estimate with a confidence interval
and the method that produced it; a `Bound` is a guarantee that holds under the stated assumptions (with a
`vacuous` flag when it says nothing useful); a `Term` is one computable term of a bound whose other terms
cannot be computed, so it is not itself a bound; a `NotComputable` names a quantity that cannot be
evaluated for this model (or not under this report's sampler), with the reason, instead of a made-up
number. All risks, cross-entropies and
mutual-information figures are in nats (Whiteley 2026, arXiv 2607.09405).

Field names are part of the public API (`GET /generalization-gap`): add fields, never rename them, and bump
`SCHEMA_VERSION` when a field's meaning changes. Version 2: sample_variability is a `Term`; n in every
bound counts queries; ce_inf_fit and the MI figures may be `NotComputable`; the MI bounds use negatives
from the positives' marginal; ce_inf_corrected, k_sufficient's interval, the k grid rule and
n_train_split_queries are new. Version-1 reports (older bundles) are upgraded on load (contract/bundles/report_v1.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.bundles.report_v1 import upgrade_v1

SCHEMA_VERSION = "2"
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


class Term(_Strict):
    """One computable term of a bound whose remaining terms are not computable: not a bound on anything by
    itself (the full bound is at least this large). `vacuous`: this term alone already exceeds the
    threshold, so the full bound is vacuous too."""

    kind: Literal["term"] = "term"
    value: float
    assumptions: str
    vacuous: bool = False


class NotComputable(_Strict):
    """A quantity that cannot be evaluated for this model or sampler; never replaced by a guess."""

    kind: Literal["not_computable"] = "not_computable"
    name: str
    reason: str


EstimateOrNot = Annotated[Estimate | NotComputable, Field(discriminator="kind")]


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
        description="the divisor of the score in every risk (Similarity.logit_temperature): the InfoNCE "
        "temperature, or 1 for AnInfoNCE whose logits are the learned similarity itself. Not the model's "
        "temperature: that is temperature_effective"
    )
    temperature_effective: float = Field(
        description="the model's temperature (contract.encoding.similarity.Similarity.effective_temperature, the same "
        "number as the training log and /generalization-gap's model.temperature); it enters the P1 bound "
        "terms and the 2/τ cap: the logits of one anchor differ by at most 2/τ_eff (so the loss spans at most "
        "4/τ_eff, P1 Lemma 5). Equals temperature for cosine; 1/max(Λ) for AnInfoNCE"
    )
    lambda_summary: LambdaSummary | None = None

    # The served names stay (report.json files and GET /generalization-gap read them); Python says which.
    @property
    def logit_temperature(self) -> float:
        """`temperature`: what every risk divides the score by (Similarity.logit_temperature)."""
        return self.temperature

    @property
    def model_temperature(self) -> float:
        """`temperature_effective`: the model's τ (Similarity.effective_temperature)."""
        return self.temperature_effective


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
        None,
        description="first-order coefficient d1 − c1 (Whiteley 2026, arXiv 2607.09405, second order), to compare with b",
    )


class KSufficient(_Strict):
    eps: float = Field(0.01, description="tolerance in nats")
    k: int | None = Field(
        description="point value: smallest k of the grid with |Δ(k')| < eps for every grid k' ≥ k (not just "
        "at k itself, where Δ can dip under eps by noise before rising again)"
    )
    ci_low: int | None = Field(
        None, description="lower end of the bootstrap interval of k (null: not reached within the grid)"
    )
    ci_high: int | None = Field(
        None, description="upper end of the bootstrap interval of k (null: not reached within the grid)"
    )
    level: float = 0.95
    method: str = ""
    reason: str | None = Field(None, description="why k is None")


class TheoryTerms(_Strict):
    """Computable terms of P1's results, flagged vacuous when they exceed log(k+1): the two sides of
    Proposition 1 are bounds; sample variability is one term of Theorem 1, whose complexity term is not
    computable, so it is a `Term`."""

    vacuous_threshold: float = Field(description="log(k+1): the largest InfoNCE gain possible at this k")
    sample_variability: Term
    finite_k_log: Bound
    prop1_upper: Bound
    not_computable: list[NotComputable]


class RetrievalMetrics(_Strict):
    n_queries: int
    ndcg_at_10: float
    recall_at_10: float
    mrr_at_10: float


class ModeMetrics(_Strict):
    """Held-out metrics of one retrieval mode of the bundle, as its index step measured them."""

    mode: Literal["dense", "lexical", "hybrid"]
    served: bool = Field(description="the bundle's default mode: what POST /search uses when no mode is sent")
    ndcg_at_10: float | None = None
    recall_at_10: float | None = None
    mrr_at_10: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict, description="every metric recorded for the mode")


class RetrievalComparison(_Strict):
    train: RetrievalMetrics = Field(description="metrics on a random sample of training queries")
    test: RetrievalMetrics
    ndcg_at_10_gap: Estimate = Field(description="train − test nDCG@10 (positive = worse on held-out)")
    by_mode: list[ModeMetrics] = Field(
        default_factory=list,
        description="the test split in every retrieval mode the bundle has (dense, and lexical and hybrid when "
        "it has a BM25 index), from its manifest (metrics['test.<mode>']); `served` marks its default mode. "
        "train, test and the gap above are dense. Filled by the API from the live bundle; empty in report.json",
    )


class ServedQueryEncoder(_Strict):
    """The query encoder the API serves, when it is not the model the report is about (a distilled one).

    Its held-out InfoNCE risk at the report's k and τ, queries from the served encoder against the full
    model's document vectors, and the paired difference to the full query encoder (same anchors, same
    negatives). Filled by the API from the bundle manifest (training/gap/served_risk.py computes it)."""

    backend: str
    k: int = Field(description="negatives per anchor: the report's k")
    temperature: float = Field(
        description="the divisor of the score in the risk, the report's model.temperature (the logit "
        "temperature: 1 for AnInfoNCE); not the model's temperature, which is model.temperature_effective"
    )
    risk_test: Estimate | None = None
    delta_vs_full: Estimate | None = Field(None, description="risk(served) − risk(full query encoder)")
    note: str = ""

    @property
    def logit_temperature(self) -> float:
        """`temperature`: what the risk divides the score by (the report's model.logit_temperature)."""
        return self.temperature


class Towers(_Strict):
    """Which encoders the report's risks use when queries and documents come from different towers."""

    query: str = Field(description="the query encoder the risks score")
    documents: str = Field(description="where the document embeddings come from")
    note: str = ""


class GapReport(_Strict):
    """Estimated generalization gap of one encoder (Whiteley 2026, arXiv 2607.09405)."""

    schema_version: str = SCHEMA_VERSION
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    units: Literal["nats"] = "nats"
    model: ModelIdentity

    # the setting every number below refers to
    k: int = Field(description="negatives per anchor, the k of training")
    k_rule: str = Field(description="how k was derived from the training configuration")
    negative_sampler: str
    n_train: int = Field(description="training anchors scored, i.e. (query, relevant document) pairs")
    n_test: int = Field(description="held-out anchors")
    n_train_queries: int = Field(description="training queries scored (a seeded sample)")
    n_test_queries: int = Field(
        description="held-out queries: the i.i.d. unit, and the n of hoeffding_halfwidth"
    )
    n_train_split_queries: int = Field(
        description="queries of the whole training split: the n of theory_terms.sample_variability"
    )
    pool_size: int = Field(
        description="documents negatives are drawn from (an anchor's own positives excluded). The corpus is "
        "the population of the negatives: risks and ce_inf_plugin are for negatives drawn from this corpus"
    )
    seed: int
    delta: float = Field(0.05, description="failure probability of the bounds (confidence 1 − delta)")
    n_bootstrap: int

    # (a) empirical gap at the training k
    risk_train: Estimate
    risk_test: Estimate
    gap: Estimate = Field(description="R_test − R_train, studentized bootstrap CI")
    hoeffding_halfwidth: Bound = Field(
        description="|R_test − R(φ̂)| ≤ value with probability ≥ 1 − delta, n = held-out queries"
    )

    # (b) risk versus k
    k_grid_rule: str = Field(description="which k the risk_vs_k grid covers, and why it stops there")
    risk_vs_k: list[RiskAtK]
    fit: InverseKFit
    ce_inf_plugin: Estimate = Field(
        description="CE∞ = E[−s⁺/τ] + E log μ(a), μ over the whole pool: the k → ∞ risk for negatives drawn "
        "from this corpus (the population is the corpus itself)"
    )
    ce_inf_corrected: EstimateOrNot = Field(
        description="CE∞ for an unbounded corpus from the same distribution: ce_inf_plugin per anchor plus its "
        "first-order finite-pool bias c1/N; not_computable when that correction is too large to trust"
    )
    ce_inf_fit: EstimateOrNot = Field(
        description="the intercept a of the a + b/k fit, bootstrap CI; not_computable when the fit is not "
        "accepted (R̂(k) not in the 1/k regime within the grid)"
    )
    first_order_d1: Estimate | None = None
    first_order_c1: Estimate | None = None
    k_sufficient: KSufficient

    # (c) bound terms
    theory_terms: TheoryTerms

    # (d) mutual information (a lower bound, not an estimate of MI)
    mi_sampler: str = Field(
        description="how the MI figures draw negatives: from the positives' marginal, which the bound needs"
    )
    mi_lower_bound_k: EstimateOrNot = Field(
        description="log(k+1) − L_InfoNCE on held-out anchors, negatives = positives of k other held-out "
        "queries (van den Oord 2018)"
    )
    mi_cap_log_k_plus_1: Bound
    mi_cap_two_over_tau: Bound
    mi_lower_bound_inf: EstimateOrNot = Field(
        description="−CE∞ under the positives' marginal (normalised-critic bound), first-order corrected for "
        "the finite number of held-out positives; uncapped by log(k+1)"
    )

    retrieval: RetrievalComparison | None = None
    plots: list[str] = Field(default_factory=list, description="PNG files beside report.json")
    notes: list[str] = Field(default_factory=list)
    served_query_encoder: ServedQueryEncoder | None = None
    towers: Towers | None = Field(
        None,
        description="set when the query tower was trained against fixed document embeddings (a query-side "
        "retrain): the risks are of that query tower against those documents; absent = one model for both",
    )

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("schema_version") == "1":
            return upgrade_v1(data, SCHEMA_VERSION)
        return data
