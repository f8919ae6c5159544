"""The report's sections built from similarity matrices: model identity, (c) bound terms, and retrieval
metrics side by side ((b) risk versus k is training.gap.risk_vs_k). `training.gap.report` assembles them
into a `GapReport`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from contract.bundles.report_schema import (
    Bound,
    LambdaSummary,
    ModelIdentity,
    NotComputable,
    RetrievalComparison,
    RetrievalMetrics,
    Term,
    TheoryTerms,
)
from contract.encoding.encoder import DEFAULT_MODEL_NAME, Encoder, default_model_path
from contract.errors import ConfigError
from training.eval.evaluate import EvalResult, evaluate
from training.gap import bootstrap, bounds
from training.gap.intervals import estimate_from_boot

if TYPE_CHECKING:
    from training.data.retrieval_data import Document, RetrievalData

NEGATIVE_SAMPLER = (
    "uniform i.i.d. (with replacement) from the corpus, the anchor query's relevant documents excluded; "
    "the same pool for both splits; never mined"
)


def model_identity(encoder: Encoder) -> ModelIdentity:
    """Metric, τ used in the risks (`Similarity.logit_temperature`) and τ_eff used in the bounds
    (`Similarity.effective_temperature`; see training.gap.report's docstring)."""
    parts = encoder.source.rstrip("/").split("/") if encoder.source else ["in-memory"]
    # a training run saves its model as <run>/model: the run folder is the name people know
    name = parts[-2] if parts[-1] == "model" and len(parts) > 1 else parts[-1]
    if encoder.source and encoder.source == str(default_model_path()):
        name = DEFAULT_MODEL_NAME
    similarity = encoder.similarity
    tau, tau_eff = similarity.logit_temperature(), similarity.effective_temperature()
    if tau is None or tau <= 0 or tau_eff is None or tau_eff <= 0:
        raise ConfigError(f"the gap report needs a positive temperature τ for {name}, got {tau_eff}")
    summary = None
    if similarity.lam:
        lam = np.asarray(similarity.lam, dtype=np.float64)
        summary = LambdaSummary(
            min=float(lam.min()), median=float(np.median(lam)), max=float(lam.max()), mean=float(lam.mean())
        )
    return ModelIdentity(
        path=encoder.source,
        name=name,
        metric=similarity.metric,
        temperature=tau,
        temperature_effective=tau_eff,
        lambda_summary=summary,
    )


def theory_section(tau_eff: float, k: int, n_train_queries: int, delta: float) -> TheoryTerms:
    """(c): P1's computable terms, vacuous when above log(k+1); the rest not computable.

    n is the number of training queries: P1's tuples are i.i.d., and anchors of one query are not.
    """
    sv = bounds.sample_variability_term(tau_eff, n_train_queries, delta)
    fk = bounds.finite_k_log_term(tau_eff, k)
    p1 = bounds.prop1_upper_term(tau_eff, k)
    return TheoryTerms(
        vacuous_threshold=math.log(k + 1),
        sample_variability=Term(
            value=sv,
            assumptions=f"(12/τ)·sqrt(log(2/δ)/(2n)), n = {n_train_queries} training queries (the i.i.d. "
            f"unit), δ = {delta}: one term of P1 Thm 1 / Prop. 3, i.i.d. tuples with random negatives (A); "
            "not a bound, since the complexity term it adds to is not computable",
            vacuous=bounds.is_vacuous(sv, k),
        ),
        finite_k_log=Bound(
            value=fk,
            assumptions="log(1 + e^{2/τ}/k) ≥ R(k) − CE∞: P1 Prop. 1 lower side (also Thm 1's finite-k bias); "
            "any embedding",
            vacuous=bounds.is_vacuous(fk, k),
        ),
        prop1_upper=Bound(
            value=p1,
            assumptions="(e^{2/τ} − 1)²/(8k) ≥ CE∞ − R(k): P1 Prop. 1 upper side; any embedding "
            "(values beyond float range are reported as 1e300)",
            vacuous=bounds.is_vacuous(p1, k),
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
    resampling: bootstrap.Resampling,
) -> RetrievalComparison:
    """nDCG@10, recall@10, MRR@10 on the train-query sample and the test queries, same pool and encoder."""
    n_boot, level, rng = resampling.n_boot, resampling.level, resampling.rng
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
    b_tr = bootstrap.bootstrap_means(tr.per_query_ndcg, n_boot, rng)
    b_te = bootstrap.bootstrap_means(te.per_query_ndcg, n_boot, rng)
    gap = tr.metrics["ndcg@10"] - te.metrics["ndcg@10"]
    return RetrievalComparison(
        train=_metrics(tr),
        test=_metrics(te),
        ndcg_at_10_gap=estimate_from_boot(
            gap, b_tr - b_te, level, f"bootstrap percentile over queries of each split ({n_boot} resamples)"
        ),
    )
