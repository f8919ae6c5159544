"""Compute, write and regenerate the generalization-gap report (Whiteley 2026, arXiv 2607.09405).

What the numbers refer to:

- anchors are (query, relevant document) pairs; a query with several relevant documents gives several
  anchors, and the bootstrap resamples whole queries (cluster bootstrap) so they are not counted as
  independent;
- negatives are drawn i.i.d. uniformly from the corpus (both splits use the same pool), excluding every
  document the anchor's query is labelled relevant to — random, never mined, as P1 assumes; each anchor
  gets its own k negatives, so anchors are independent given the model and no batch resampling is needed;
- the training split is a seeded sample of at most `max_train_queries` queries, scored with the final
  model in eval mode; the CI of R_train resamples its anchors too, which is conservative for a fixed
  training set;
- risks use τ for cosine models. AnInfoNCE models (Rusak et al. 2024/25) use their learned similarity
  −½‖√Λ⊙(u−v)‖² directly as the logit (τ = 1); since that similarity lies in [−2·max Λ, 0], logits of one
  anchor differ by at most 2·max Λ — as cosine logits s/τ ∈ [−1/τ, 1/τ] differ by at most 2/τ — so the P1
  bound terms and the 2/τ cap use τ_eff = 1/max Λ (for Λ = λ·I this is exactly InfoNCE at τ = 1/λ);
- every n in a bound counts queries, not anchors: anchors of one query are dependent;
- the corpus is the population of the negatives: R̂(k) and the plug-in CE∞ are for negatives drawn from
  this corpus; `ce_inf_corrected` adds the first-order bias for an unbounded corpus from the same law, and
  the k grid stops at a fraction of the pool (`K_POOL_FRACTION`);
- the MI figures use their own sampler, the positives of other held-out queries (training.gap.mutual_info),
  because under the corpus sampler they are not lower bounds.

Cost: one (anchors × pool) float32 similarity matrix per split, so memory grows with
max_train_queries × corpus size (300 × 1M documents ≈ 1.2 GB); the corpus embeddings of the trainer's
last evaluation are reused rather than encoded again.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from contract.atomic import write_text_atomic
from contract.config import TrainConfig
from contract.encoder import Encoder
from contract.errors import ConfigError
from contract.log_setup import progress_bars_enabled
from contract.report_schema import REPORT_FILE, Bound, GapReport
from training.data import Document, RetrievalData, load_split
from training.evaluate import encode_corpus
from training.gap import bootstrap, bounds
from training.gap import estimators as est
from training.gap.anchors import Anchors
from training.gap.intervals import estimate_from_boot
from training.gap.mutual_info import MI_SAMPLER, mi_section
from training.gap.risk_vs_k import K_POOL_FRACTION, risk_vs_k_section
from training.gap.sections import NEGATIVE_SAMPLER, model_identity, retrieval_section, theory_section
from training.query_sample import sample_queries
from training.validation import carve_validation

logger = logging.getLogger(__name__)

REPORT_DIR = "report"
K_RULE = (
    "k = batch_size − 1 (in-batch) + batch_size × hard_negatives (mined negatives are shared by the whole "
    "batch) + random_negatives: the negatives one training row was scored against"
)


def training_k(config: TrainConfig) -> int:
    """The most negatives one training row can see (rule: `K_RULE`): an upper bound on the actual k."""
    return config.batch_size - 1 + config.batch_size * config.hard_negatives + config.random_negatives


def actual_training_k(records: list[dict[str, Any]], config: TrainConfig) -> tuple[int, str]:
    """The k training rows actually saw, from the trainer's per-step log, and the rule that says how.

    Mined negatives shared by a batch are deduplicated (and dropped when they are a positive of another
    row) and an epoch's tail batch is smaller, so `training_k(config)` is only an upper bound. Steps logged
    before `n_negatives` existed give batch_size − 1 + n_extra_negatives (exact except in tail batches).
    """
    upper = training_k(config)
    if not records:
        return upper, K_RULE
    per_step = np.array(
        [r.get("n_negatives", config.batch_size - 1 + r.get("n_extra_negatives", 0)) for r in records]
    )
    k = max(1, round(float(per_step.mean())))
    rule = (
        f"mean negatives per training row over the {len(per_step)} steps (min {per_step.min()}, max "
        f"{per_step.max()}; in-batch + deduplicated mined + random), rounded; the configuration's upper "
        f"bound is {upper} ({K_RULE})"
    )
    return k, rule


def _anchors(
    encoder: Encoder, data: RetrievalData, query_emb: np.ndarray, doc_emb: np.ndarray, column: dict[str, int]
) -> Anchors:
    sim = encoder.similarity_matrix(query_emb, doc_emb)  # (n_queries, n_pool)
    rows, cols, groups, exclude = [], [], [], []
    for qi, qid in enumerate(data.queries):
        relevant = [column[d] for d in data.qrels.get(qid, {})]
        for c in relevant:
            rows.append(qi)
            cols.append(c)
            groups.append(qi)
            exclude.append(relevant)
    rows_arr = np.asarray(rows, dtype=np.int64)
    return Anchors(
        sim=sim[rows_arr],  # (n_anchors, n_pool)
        pos=np.asarray(sim[rows_arr, cols], dtype=np.float64),
        exclude=est.pad_exclusions(exclude, doc_emb.shape[0]),
        groups=np.asarray(groups),
        n_queries=len(data.queries),
        pos_col=np.asarray(cols, dtype=np.int64),
    )


def _pool_embeddings(
    encoder: Encoder,
    corpus: dict[str, Document],
    doc_ids: list[str] | None,
    doc_embeddings: np.ndarray | None,
) -> np.ndarray:
    """Embeddings of `corpus` in its order, reusing the rows of doc_embeddings given for doc_ids."""
    if doc_ids is None or doc_embeddings is None:
        return encode_corpus(encoder, corpus, show_progress=progress_bars_enabled())[1]
    if len(doc_ids) != len(doc_embeddings):
        raise ConfigError(f"doc_ids has {len(doc_ids)} entries but doc_embeddings {len(doc_embeddings)} rows")
    if list(corpus) == list(doc_ids):
        return np.asarray(doc_embeddings, dtype=np.float32)
    given = {d: i for i, d in enumerate(doc_ids)}
    order = list(corpus)
    out = np.empty((len(order), doc_embeddings.shape[1]), dtype=np.float32)  # (n_pool, dim)
    have = [j for j, d in enumerate(order) if d in given]
    out[have] = doc_embeddings[[given[order[j]] for j in have]]
    missing = [j for j, d in enumerate(order) if d not in given]
    if missing:
        out[missing] = encode_corpus(
            encoder, {order[j]: corpus[order[j]] for j in missing}, show_progress=progress_bars_enabled()
        )[1]
    return out


def compute_report(
    encoder: Encoder,
    train: RetrievalData,
    test: RetrievalData,
    *,
    k: int,
    seed: int = 0,
    doc_ids: list[str] | None = None,
    doc_embeddings: np.ndarray | None = None,
    max_train_queries: int | None = 300,
    max_test_queries: int | None = None,
    k_max: int = 8192,
    n_boot: int = 2000,
    delta: float = 0.05,
    eps: float = 0.01,
    k_rule: str = "given by the caller",
    level: float = 0.95,
) -> GapReport:
    """The full report for `encoder` (Whiteley 2026, arXiv 2607.09405); see the module docstring for what it assumes."""
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    identity = model_identity(encoder)
    tau, tau_eff = identity.temperature, identity.temperature_effective
    rng = np.random.default_rng(seed)
    n_train_split_queries = len(train.queries)
    train = sample_queries(train, max_train_queries, seed)
    test = sample_queries(test, max_test_queries, seed)
    corpus = {**train.corpus, **test.corpus}
    column = {d: i for i, d in enumerate(corpus)}
    doc_emb = _pool_embeddings(encoder, corpus, doc_ids, doc_embeddings)  # (n_pool, dim)
    q_train = encoder.encode(
        list(train.queries.values()), kind="query", show_progress=progress_bars_enabled()
    )  # (nq, dim)
    q_test = encoder.encode(
        list(test.queries.values()), kind="query", show_progress=progress_bars_enabled()
    )  # (nq, dim)
    a_train = _anchors(encoder, train, q_train, doc_emb, column)
    a_test = _anchors(encoder, test, q_test, doc_emb, column)
    logger.info(
        "gap report: %d train / %d test anchors, pool %d, k %d, τ %.4g",
        len(a_train.pos),
        len(a_test.pos),
        len(corpus),
        k,
        tau,
    )

    # (a) the gap at the training k
    l_train = est.risk_with_random_negatives(a_train.sim, a_train.pos, a_train.exclude, k, tau, rng)
    l_test = est.risk_with_random_negatives(a_test.sim, a_test.pos, a_test.exclude, k, tau, rng)
    g = bootstrap.gap_with_ci(
        l_train,
        l_test,
        n_boot=n_boot,
        level=level,
        rng=rng,
        groups_train=a_train.groups,
        groups_test=a_test.groups,
    )
    boot = f"bootstrap percentile over queries ({n_boot} resamples), k={k} random pool negatives per anchor"
    risk_train = estimate_from_boot(g.train, g.train_boot, level, boot)
    risk_test = estimate_from_boot(g.test, g.test_boot, level, boot)
    gap = estimate_from_boot(
        g.gap, g.test_boot - g.train_boot, level, boot + "; splits resampled independently"
    )
    hw = bounds.hoeffding_halfwidth(tau_eff, a_test.n_queries, delta)
    hoeffding = Bound(
        value=hw,
        assumptions=f"n = {a_test.n_queries} held-out queries (the i.i.d. unit: anchors of one query are "
        "dependent) that the model does not depend on; for the mean over queries of each query's mean "
        f"anchor loss, whose range is ≤ 4/τ (P1 Lemma 5); Hoeffding at confidence {1 - delta:g}",
        vacuous=bounds.is_vacuous(hw, k),
    )

    # (b) risk versus k on held-out anchors, plug-in CE∞, k_sufficient
    curve = risk_vs_k_section(a_test, tau, k_max, n_boot, level, eps, rng)
    notes = list(curve.notes)
    min_pool = int(len(corpus) - (a_test.exclude >= 0).sum(axis=1).max())
    if k > min_pool // K_POOL_FRACTION:
        notes.append(
            f"the training k = {k} exceeds 1/{K_POOL_FRACTION} of the pool ({min_pool} documents): risk_train, "
            "risk_test and gap describe negatives drawn from this corpus, with repeats, not from an unbounded "
            "population"
        )

    # (d) mutual information, under the positives' marginal (training.gap.mutual_info)
    mi = mi_section(a_test, k, tau, n_boot, level, rng)
    retrieval = retrieval_section(
        encoder, train, test, corpus, doc_emb, q_train, q_test, n_boot=n_boot, level=level, rng=rng
    )
    return GapReport(
        model=identity,
        k=k,
        k_rule=k_rule,
        negative_sampler=NEGATIVE_SAMPLER,
        n_train=len(l_train),
        n_test=len(l_test),
        n_train_queries=a_train.n_queries,
        n_test_queries=a_test.n_queries,
        n_train_split_queries=n_train_split_queries,
        pool_size=len(corpus),
        seed=seed,
        delta=delta,
        n_bootstrap=n_boot,
        risk_train=risk_train,
        risk_test=risk_test,
        gap=gap,
        hoeffding_halfwidth=hoeffding,
        k_grid_rule=curve.k_grid_rule,
        risk_vs_k=curve.rows,
        fit=curve.fit,
        ce_inf_plugin=curve.ce_inf_plugin,
        ce_inf_corrected=curve.ce_inf_corrected,
        ce_inf_fit=curve.ce_inf_fit,
        first_order_d1=curve.d1,
        first_order_c1=curve.c1,
        k_sufficient=curve.k_sufficient,
        theory_terms=theory_section(tau_eff, k, n_train_split_queries, delta),
        mi_sampler=MI_SAMPLER,
        mi_lower_bound_k=mi.mi_k,
        mi_cap_log_k_plus_1=Bound(
            value=math.log(k + 1), assumptions="I_NCE ≤ log(k+1) (Poole et al. 2019, arXiv 1905.06922)"
        ),
        mi_cap_two_over_tau=Bound(
            value=2.0 / tau_eff,
            assumptions="the critic s/τ lies in [−1/τ_eff, 1/τ_eff], so I_NCE(k) ≤ 2/τ_eff for every k",
        ),
        mi_lower_bound_inf=mi.mi_inf,
        retrieval=retrieval,
        notes=notes,
    )


def write_report(report: GapReport, folder: str | Path) -> Path:
    """Write the plots, then report.json (atomically: temp file + os.replace); returns the JSON path."""
    from training.gap.plots import write_plots

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report.plots = write_plots(report, folder)
    write_text_atomic(folder / REPORT_FILE, report.model_dump_json(indent=2))
    logger.info("gap report written to %s", folder / REPORT_FILE)
    return folder / REPORT_FILE


def report_after_training(
    encoder: Encoder,
    train_data: RetrievalData,
    test_data: RetrievalData,
    *,
    config: TrainConfig,
    doc_ids: list[str] | None,
    doc_embeddings: np.ndarray | None,
    out_dir: str | Path,
    train_log: list[dict[str, Any]] | None = None,
) -> GapReport:
    """The report the trainer writes into `<out_dir>/report/`, at the k and τ it trained with (the actual
    k of `train_log` when given)."""
    k, k_rule = actual_training_k(train_log or [], config)
    report = compute_report(
        encoder,
        train_data,
        test_data,
        k=k,
        k_rule=k_rule,
        seed=config.seed,
        doc_ids=doc_ids,
        doc_embeddings=doc_embeddings,
        max_test_queries=config.eval_max_queries,
        max_train_queries=config.eval_max_queries or 300,
    )
    write_report(report, Path(out_dir) / REPORT_DIR)
    return report


def run_report(
    model_dir: str | Path | None,
    data_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    k: int | None = None,
    seed: int | None = None,
    max_train_queries: int | None = 300,
    max_test_queries: int | None = None,
    n_boot: int = 2000,
) -> Path:
    """Regenerate a report for any model folder (`python -m training report`); returns report.json's path.

    A training run's folder (or its `<run>/model`) brings its `<run>/config.json`, which fixes k, the splits and the
    seed (unless given); otherwise k defaults to TrainConfig's (batch_size − 1) and `out_dir` must be given.
    """
    model_path = Path(model_dir) if model_dir is not None else None
    if model_path is not None and (model_path / "model").is_dir() and (model_path / "config.json").exists():
        model_path = model_path / "model"  # the run folder itself was given
    config, run_dir = TrainConfig.model_validate({}), None
    held_out = 0.0  # share of the train split the run held out as validation (runs from before: none)
    if model_path is not None and (model_path.parent / "config.json").exists():
        run_dir = model_path.parent
        saved = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        config = TrainConfig.model_validate(saved.get("config", saved))
        held_out = float(saved.get("config", saved).get("validation_fraction", 0.0))
    if out_dir is None:
        if run_dir is None:
            raise ConfigError("--out is required unless --model is a training run folder (or its model/)")
        out_dir = run_dir / REPORT_DIR
    records: list[dict[str, Any]] = []
    if run_dir is not None and (run_dir / "train_log.jsonl").exists():
        lines = (run_dir / "train_log.jsonl").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    run_k, run_rule = actual_training_k(records, config)
    encoder = Encoder.load(model_path)
    train = load_split(data_dir, config.train_split, seed=config.seed)
    train = carve_validation(train, held_out, config.seed)[0]  # the queries the run was trained on
    test = load_split(data_dir, config.eval_split, seed=config.seed)
    report = compute_report(
        encoder,
        train,
        test,
        k=k if k is not None else run_k,
        k_rule="given on the command line" if k is not None else run_rule,
        seed=config.seed if seed is None else seed,
        max_train_queries=max_train_queries,
        max_test_queries=max_test_queries,
        n_boot=n_boot,
    )
    return write_report(report, out_dir)
