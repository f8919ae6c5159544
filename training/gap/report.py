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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contract.atomic import write_text_atomic
from contract.bundles.report_schema import REPORT_FILE, Bound, GapReport
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.errors import ConfigError
from contract.log_setup import progress_bars_enabled
from training.data.query_sample import sample_queries
from training.data.retrieval_data import Document, RetrievalData
from training.data.split import load_split
from training.data.validation_carve import carve_validation
from training.gap.anchors import Anchors, build_anchors, pool_embeddings
from training.gap.bootstrap import Resampling
from training.gap.gap_at_k import gap_at_k_section, pool_notes
from training.gap.mutual_info import MI_SAMPLER, MISection, mi_section
from training.gap.risk_vs_k import risk_vs_k_section
from training.gap.sections import NEGATIVE_SAMPLER, model_identity, retrieval_section, theory_section
from training.gap.training_k import actual_training_k

logger = logging.getLogger(__name__)

REPORT_DIR = "report"


@dataclass
class _Scored:
    """Both splits scored against one pool: the inputs every section reads."""

    train: RetrievalData  # the sampled training queries
    test: RetrievalData
    corpus: dict[str, Document]  # the pool: both splits' documents
    doc_emb: np.ndarray  # (n_pool, dim)
    q_train: np.ndarray  # (n_train_queries, dim)
    q_test: np.ndarray  # (n_test_queries, dim)
    a_train: Anchors
    a_test: Anchors


@dataclass(frozen=True)
class ReportOptions:
    """How a report is computed: the k it is read at (and why that k), the query samples, the bootstrap,
    the bounds' confidence and the risk-vs-k curve's reach and tolerance."""

    k: int
    k_rule: str = "given by the caller"
    seed: int = 0
    max_train_queries: int | None = 300
    max_test_queries: int | None = None
    k_max: int = 8192
    n_boot: int = 2000
    delta: float = 0.05
    eps: float = 0.01
    level: float = 0.95


@dataclass(frozen=True)
class CorpusVectors:
    """A corpus encoding the caller already has (row i is document doc_ids[i]): the report reuses it."""

    doc_ids: list[str]
    embeddings: np.ndarray  # (n_docs, D)


def compute_report(
    encoder: Encoder,
    train: RetrievalData,
    test: RetrievalData,
    options: ReportOptions,
    *,
    corpus: CorpusVectors | None = None,
) -> GapReport:
    """The full report for `encoder` (Whiteley 2026, arXiv 2607.09405); see the module docstring for what it
    assumes. τ is the encoder's own (contract.encoding.similarity: risks divide by `logit_temperature`, the bound
    terms use `effective_temperature`)."""
    o, k = options, options.k
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    identity = model_identity(encoder)
    tau, tau_eff = identity.logit_temperature, identity.model_temperature
    # one stream, drawn in the order of the sections below
    resampling = Resampling(o.n_boot, o.level, np.random.default_rng(o.seed))
    n_train_split_queries = len(train.queries)
    scored = _score_splits(
        encoder,
        sample_queries(train, o.max_train_queries, o.seed),
        sample_queries(test, o.max_test_queries, o.seed),
        corpus,
    )
    a_train, a_test, n_pool = scored.a_train, scored.a_test, len(scored.corpus)
    logger.info("gap report: %d train / %d test anchors, pool %d, k %d, τ %.4g", len(a_train.pos),
                len(a_test.pos), n_pool, k, tau)  # fmt: skip
    at_k = gap_at_k_section(a_train, a_test, k, tau, tau_eff, o.delta, resampling)  # (a)
    curve = risk_vs_k_section(a_test, tau, o.k_max, o.n_boot, o.level, o.eps, resampling.rng)  # (b)
    mi = mi_section(a_test, k, tau, o.n_boot, o.level, resampling.rng)  # (d), the positives' marginal
    retrieval = retrieval_section(
        encoder, scored.train, scored.test, scored.corpus, scored.doc_emb, scored.q_train, scored.q_test,
        resampling=resampling,
    )  # fmt: skip
    return GapReport(
        model=identity, k=k, k_rule=o.k_rule, negative_sampler=NEGATIVE_SAMPLER, seed=o.seed, delta=o.delta,
        n_bootstrap=o.n_boot, n_train_queries=a_train.n_queries, n_test_queries=a_test.n_queries,
        n_train_split_queries=n_train_split_queries, pool_size=n_pool,
        **at_k.report_fields(),
        **curve.report_fields(),
        theory_terms=theory_section(tau_eff, k, n_train_split_queries, o.delta),  # (c)
        **_mi_fields(mi, k, tau_eff),
        retrieval=retrieval,
        notes=list(curve.notes) + pool_notes(a_test, n_pool, k),
    )  # fmt: skip


def _score_splits(
    encoder: Encoder,
    train: RetrievalData,
    test: RetrievalData,
    known: CorpusVectors | None,
) -> _Scored:
    """Both splits' queries encoded and their anchors scored against the union of their corpora."""
    corpus = {**train.corpus, **test.corpus}
    column = {d: i for i, d in enumerate(corpus)}
    doc_ids, doc_embeddings = (known.doc_ids, known.embeddings) if known is not None else (None, None)
    doc_emb = pool_embeddings(encoder, corpus, doc_ids, doc_embeddings)  # (n_pool, dim)
    show = progress_bars_enabled()
    q_train = encoder.encode(list(train.queries.values()), kind="query", show_progress=show)  # (nq, dim)
    q_test = encoder.encode(list(test.queries.values()), kind="query", show_progress=show)  # (nq, dim)
    return _Scored(
        train, test, corpus, doc_emb, q_train, q_test,
        build_anchors(encoder.similarity, list(train.queries), train.qrels, q_train, doc_emb, column),
        build_anchors(encoder.similarity, list(test.queries), test.qrels, q_test, doc_emb, column),
    )  # fmt: skip


def _mi_fields(mi: MISection, k: int, tau_eff: float) -> dict[str, Any]:
    """(d) the MI lower bounds and their two caps, as GapReport fields."""
    return {
        "mi_sampler": MI_SAMPLER,
        "mi_lower_bound_k": mi.mi_k,
        "mi_cap_log_k_plus_1": Bound(
            value=math.log(k + 1), assumptions="I_NCE ≤ log(k+1) (Poole et al. 2019, arXiv 1905.06922)"
        ),
        "mi_cap_two_over_tau": Bound(
            value=2.0 / tau_eff,
            assumptions="the critic s/τ lies in [−1/τ_eff, 1/τ_eff], so I_NCE(k) ≤ 2/τ_eff for every k",
        ),
        "mi_lower_bound_inf": mi.mi_inf,
    }


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
    options = ReportOptions(
        k=k,
        k_rule=k_rule,
        seed=config.seed,
        max_test_queries=config.eval_max_queries,
        max_train_queries=config.eval_max_queries or 300,
    )
    corpus = (
        CorpusVectors(doc_ids, doc_embeddings) if doc_ids is not None and doc_embeddings is not None else None
    )
    report = compute_report(encoder, train_data, test_data, options, corpus=corpus)
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
    options = ReportOptions(
        k=k if k is not None else run_k,
        k_rule="given on the command line" if k is not None else run_rule,
        seed=config.seed if seed is None else seed,
        max_train_queries=max_train_queries,
        max_test_queries=max_test_queries,
        n_boot=n_boot,
    )
    report = compute_report(encoder, train, test, options)
    return write_report(report, out_dir)
