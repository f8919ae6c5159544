"""The report's sections built from similarity matrices: model identity, (b) risk versus k, (c) bound
terms, and retrieval metrics side by side. `training.gap.report` assembles them into a `GapReport`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from contract.encoder import DEFAULT_MODEL_NAME, Encoder, default_model_path
from contract.errors import ConfigError
from contract.report_schema import (
    Bound,
    Estimate,
    InverseKFit,
    KSufficient,
    LambdaSummary,
    ModelIdentity,
    NotComputable,
    RetrievalComparison,
    RetrievalMetrics,
    RiskAtK,
    Term,
    TheoryTerms,
)
from training.evaluate import EvalResult, evaluate
from training.gap import estimators as est
from training.gap.anchors import Anchors
from training.gap.intervals import estimate_from_boot, widen
from training.gap.mutual_info import MAX_FIRST_ORDER

if TYPE_CHECKING:
    from training.data import Document, RetrievalData

NEGATIVE_SAMPLER = (
    "uniform i.i.d. (with replacement) from the corpus, the anchor query's relevant documents excluded; "
    "the same pool for both splits; never mined"
)


def model_identity(encoder: Encoder, temperature: float | None) -> ModelIdentity:
    """Metric, τ used in the risks and τ_eff used in the bounds (see training.gap.report's docstring)."""
    parts = encoder.source.rstrip("/").split("/") if encoder.source else ["in-memory"]
    # a training run saves its model as <run>/model: the run folder is the name people know
    name = parts[-2] if parts[-1] == "model" and len(parts) > 1 else parts[-1]
    if encoder.source and encoder.source == str(default_model_path()):
        name = DEFAULT_MODEL_NAME
    if encoder.metric == "aninfonce":
        lam = np.asarray(encoder.similarity.lam, dtype=np.float64)
        summary = LambdaSummary(
            min=float(lam.min()), median=float(np.median(lam)), max=float(lam.max()), mean=float(lam.mean())
        )
        return ModelIdentity(
            path=encoder.source,
            name=name,
            metric="aninfonce",
            temperature=1.0,
            temperature_effective=1.0 / float(lam.max()),
            lambda_summary=summary,
        )
    tau = temperature if temperature is not None else encoder.similarity.temperature
    if tau is None or tau <= 0:
        raise ConfigError(f"the gap report needs a positive temperature τ for {name}, got {tau}")
    return ModelIdentity(
        path=encoder.source, name=name, metric="cosine", temperature=tau, temperature_effective=tau
    )


# The grid of R̂(k) stops at k = pool/K_POOL_FRACTION: P1's negatives are fresh draws from an unbounded
# population, and k draws with replacement from a pool of N documents repeat one with probability ≈ k/N per
# draw; past a small fraction of the pool R̂(k) describes this corpus's finite law, not the population's
# (bench/gap_validation.py, "pool fraction" table).
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


def risk_vs_k_section(
    a: Anchors, tau: float, k_max: int, n_boot: int, level: float, eps: float, rng: np.random.Generator
) -> CurveSection:
    """(b): R̂(k) on held-out anchors over the capped grid, the a + b/k fit, plug-in CE∞ (raw and corrected
    for the finite pool), Δ(k) and k_sufficient with its bootstrap interval."""
    allowed = a.sim.shape[1] - (a.exclude >= 0).sum(axis=1)  # (n,) pool size each anchor draws from
    ks, grid_rule = k_grid(k_max, int(allowed.min()))
    per_k, var = [], []
    for k in tqdm(ks, desc="risk vs k", leave=False):
        col, v = est.risk_curve(a.sim, a.pos, a.exclude, [k], tau, rng)
        per_k.append(col[:, 0])
        var.append(v[0])
    curve = np.stack(per_k, axis=1)  # (n_anchors, n_k)
    var_arr = np.asarray(var)
    ce_terms = est.plugin_ce_inf_terms(a.sim, a.pos, a.exclude, tau)  # (n_anchors,)
    d1, c1 = est.first_order_terms(a.sim, a.pos, a.exclude, tau)
    bias = c1 / allowed  # (n,) first-order Jensen bias of log μ̂ over a pool of N: E log μ̂ ≈ log μ − c1/N
    # one set of bootstrap replicates for every column keeps Δ(k) = R(k) − CE∞ jointly resampled
    cols = np.column_stack([curve, ce_terms, ce_terms + bias, d1, c1])  # (n_anchors, n_k + 4)
    boot = est.bootstrap_means(cols, n_boot, rng, a.groups)  # (B, n_k + 4)
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
    f = est.fit_inverse_k(ks, r, var_arr, k_floor=d1_hat)
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
    notes = []
    ce_fit: Estimate | NotComputable
    if f.accepted:
        a_boot = est.bootstrap_fit_intercepts(b_r, ks, var_arr, f.k_min)
        ce_fit = estimate_from_boot(f.a, a_boot, level, f"intercept of the WLS a + b/k fit; {method}")
    else:
        ce_fit = NotComputable(
            name="ce_inf_fit",
            reason=f"R̂(k) is not in the 1/k regime up to k_max = {ks[-1]} (no grid range passed the linearity "
            f"rule; the regime needs k ≫ d1 ≈ {d1_hat:.3g}): an intercept extrapolated from outside it is no "
            "estimate of CE∞; use ce_inf_plugin",
        )
        notes.append(f"the a + b/k fit is not accepted up to k = {ks[-1]}; ce_inf_fit is not computable")
    mean_bias = float(bias.mean())
    ce_corr: Estimate | NotComputable
    if mean_bias > MAX_FIRST_ORDER:
        ce_corr = NotComputable(
            name="ce_inf_corrected",
            reason=f"first-order finite-pool bias c1/N = {mean_bias:.3g} nats exceeds the {MAX_FIRST_ORDER} "
            "nats a first-order correction can be trusted for (e^{s/τ} is too heavy-tailed over this pool); "
            "ce_inf_plugin holds for negatives drawn from this corpus",
        )
    else:
        ce_corr = widen(
            estimate_from_boot(
                float(point[n_k + 1]),
                boot[:, n_k + 1],
                level,
                f"ce_inf_plugin + c1(a)/N per anchor (mean {mean_bias:.3g} nats: E log μ̂ ≈ log μ − c1/N); the "
                f"interval resamples the correction with the anchors; {method}",
            ),
            low=0.5 * mean_bias,
            high=0.5 * mean_bias,
        )
    k_suff = est.k_sufficient(ks, r - ce, eps)
    k_lo, k_hi = est.k_sufficient_interval(ks, b_r - b_ce[:, None], eps, level)
    return CurveSection(
        rows=rows,
        k_grid_rule=grid_rule,
        fit=fit,
        ce_inf_plugin=estimate_from_boot(
            ce,
            b_ce,
            level,
            f"E[−s⁺/τ] + E log μ(a), μ = mean of e^{{s/τ}} over the pool (the corpus is the population); {method}",
        ),
        ce_inf_corrected=ce_corr,
        ce_inf_fit=ce_fit,
        d1=estimate_from_boot(d1_hat, boot[:, -2], level, f"E[e^{{s⁺/τ}}/μ(a)]; {method}"),
        c1=estimate_from_boot(c1_hat, boot[:, -1], level, f"½ E[Var(e^{{s/τ}})/μ(a)²]; {method}"),
        k_sufficient=KSufficient(
            eps=eps,
            k=k_suff,
            ci_low=k_lo,
            ci_high=k_hi,
            level=level,
            method=f"point value on the grid; interval: the same rule on each bootstrap replicate of Δ(k) "
            f"({method}), null = not reached within the grid",
            reason=None
            if k_suff is not None
            else f"|Δ(k)| ≥ {eps} nats somewhere in k ≤ {ks[-1]} (Δ({ks[-1]}) = {r[-1] - ce:.3g}): "
            "more negatives than the grid covers would still change the risk",
        ),
        notes=notes,
    )


def theory_section(tau_eff: float, k: int, n_train_queries: int, delta: float) -> TheoryTerms:
    """(c): P1's computable terms, vacuous when above log(k+1); the rest not computable.

    n is the number of training queries: P1's tuples are i.i.d., and anchors of one query are not.
    """
    sv = est.sample_variability_term(tau_eff, n_train_queries, delta)
    fk = est.finite_k_log_term(tau_eff, k)
    p1 = est.prop1_upper_term(tau_eff, k)
    return TheoryTerms(
        vacuous_threshold=math.log(k + 1),
        sample_variability=Term(
            value=sv,
            assumptions=f"(12/τ)·sqrt(log(2/δ)/(2n)), n = {n_train_queries} training queries (the i.i.d. "
            f"unit), δ = {delta}: one term of P1 Thm 1 / Prop. 3, i.i.d. tuples with random negatives (A); "
            "not a bound, since the complexity term it adds to is not computable",
            vacuous=est.is_vacuous(sv, k),
        ),
        finite_k_log=Bound(
            value=fk,
            assumptions="log(1 + e^{2/τ}/k) ≥ R(k) − CE∞: P1 Prop. 1 lower side (also Thm 1's finite-k bias); "
            "any embedding",
            vacuous=est.is_vacuous(fk, k),
        ),
        prop1_upper=Bound(
            value=p1,
            assumptions="(e^{2/τ} − 1)²/(8k) ≥ CE∞ − R(k): P1 Prop. 1 upper side; any embedding "
            "(values beyond float range are reported as 1e300)",
            vacuous=est.is_vacuous(p1, k),
        ),
        not_computable=[
            NotComputable(
                name="finite_k_density_ratio",
                reason="(4/(τk))·E[(dM/dπ)²] needs the density ratio of the pair generator, which a "
                "dataset of (query, document) pairs does not reveal (P1 Prop. 2 / Thm 1). For "
                "deterministic pairs over N documents with uniform π it would be 4N/(τk): "
                "vacuous unless k ≫ N/τ",
            ),
            NotComputable(
                name="complexity_penalty",
                reason="(192/τ)·sqrt(d_Θ/n)·min{…} needs P1 assumption (C): Euclidean inputs and a "
                "parameter-Lipschitz constant C_Φ over a radius-R ball fixed before training, none of which "
                "exists for a transformer on text; with d_Θ ≈ 2e7 it would exceed any useful value anyway",
            ),
        ],
    )


def _metrics(res: EvalResult) -> RetrievalMetrics:
    m = res.metrics
    return RetrievalMetrics(
        n_queries=res.n_queries, ndcg_at_10=m["ndcg@10"], recall_at_10=m["recall@10"], mrr_at_10=m["mrr@10"]
    )


def retrieval_section(
    encoder: Encoder,
    train: RetrievalData,
    test: RetrievalData,
    corpus: dict[str, Document],
    doc_emb: np.ndarray,
    q_train: np.ndarray,
    q_test: np.ndarray,
    *,
    n_boot: int,
    level: float,
    rng: np.random.Generator,
) -> RetrievalComparison:
    """nDCG@10, recall@10, MRR@10 on the train-query sample and the test queries, same pool and encoder."""
    results = []
    for data, q_emb in ((train, q_train), (test, q_test)):
        view = replace(data, corpus=corpus)  # both splits ranked over the same pool
        results.append(
            evaluate(
                encoder,
                view,
                doc_embeddings=doc_emb,
                query_embeddings=q_emb,
                k_values=(10,),
                show_progress=False,
            )
        )
    tr, te = results
    b_tr = est.bootstrap_means(tr.per_query_ndcg, n_boot, rng)
    b_te = est.bootstrap_means(te.per_query_ndcg, n_boot, rng)
    gap = tr.metrics["ndcg@10"] - te.metrics["ndcg@10"]
    return RetrievalComparison(
        train=_metrics(tr),
        test=_metrics(te),
        ndcg_at_10_gap=estimate_from_boot(
            gap, b_tr - b_te, level, f"bootstrap percentile over queries of each split ({n_boot} resamples)"
        ),
    )
