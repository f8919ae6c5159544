"""The gap report end to end with the real encoder: schema, labelled numbers, oracles, plots, errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contract.bundles.report_schema import REPORT_FILE, Bound, Estimate, GapReport, NotComputable, Term
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.encoding.similarity import Similarity
from contract.errors import ConfigError
from training.data.beir import load_beir
from training.data.query_sample import subset
from training.data.retrieval_data import Document, RetrievalData
from training.gap import bounds
from training.gap.plots import risk_vs_k_figure
from training.gap.report import ReportOptions, compute_report, report_after_training, write_report
from training.gap.risk_vs_k import K_POOL_FRACTION
from training.gap.training_k import K_RULE, actual_training_k, training_k

TOPICS = [
    (
        "volcano",
        "Lava from the volcano flowed down the mountain after the eruption.",
        "When did the volcano erupt?",
    ),
    (
        "piano",
        "She practised the piano sonata every evening before the recital.",
        "piano practice for a recital",
    ),
    (
        "vaccine",
        "The vaccine trial showed strong immune responses in older adults.",
        "vaccine immune response",
    ),
    ("bitcoin", "Bitcoin prices fell sharply as exchanges halted withdrawals.", "crypto exchange crash"),
    ("glacier", "Glaciers in the Alps are retreating faster each decade.", "melting alpine glaciers"),
    (
        "soccer",
        "The striker scored twice in the final minutes of the match.",
        "football goals late in a game",
    ),
    ("bread", "Knead the dough and let the sourdough rise overnight.", "how to bake sourdough bread"),
    ("comet", "A bright comet will be visible near the horizon at dawn.", "comet sighting at sunrise"),
    ("tax", "The new tax law lowers rates for small businesses.", "small business tax cut"),
    ("coral", "Warm water is bleaching the coral reefs of the Pacific.", "coral reef bleaching"),
    ("chess", "The grandmaster sacrificed a rook to win the endgame.", "chess endgame sacrifice"),
    ("malaria", "Mosquito nets reduced malaria infections in the villages.", "preventing malaria"),
    ("rail", "The high-speed railway cut travel time between the cities.", "fast trains between cities"),
    ("honey", "Bees produce honey from the nectar of spring flowers.", "where honey comes from"),
]
REPO = Path(__file__).resolve().parents[3]
FILLER = [f"Unrelated note number {i} about office supplies, staplers and paper clips." for i in range(10)]


def _toy_splits() -> tuple[RetrievalData, RetrievalData]:
    corpus = {f"d-{name}": Document(f"d-{name}", name.title(), text, {}) for name, text, _ in TOPICS}
    corpus |= {f"f{i}": Document(f"f{i}", "", text, {}) for i, text in enumerate(FILLER)}
    queries = {f"q-{name}": q for name, _, q in TOPICS}
    qrels = {f"q-{name}": {f"d-{name}": 1} for name, _, _ in TOPICS}
    qrels["q-volcano"]["d-glacier"] = 1  # a query with two positives: two anchors, one bootstrap unit

    def side(names: list[str]) -> RetrievalData:
        ids = [f"q-{n}" for n in names]
        return RetrievalData(corpus, {q: queries[q] for q in ids}, {q: qrels[q] for q in ids}, "toy")

    names = [t[0] for t in TOPICS]
    return side(names[:8]), side(names[8:])


def _estimates(obj) -> list[Estimate]:
    if isinstance(obj, Estimate):
        return [obj]
    if isinstance(obj, list):
        return [e for x in obj for e in _estimates(x)]
    if hasattr(obj, "model_fields"):
        return [e for name in type(obj).model_fields for e in _estimates(getattr(obj, name))]
    return []


def _check_report(report: GapReport) -> None:
    estimates = _estimates(report)
    assert len(estimates) > 10
    for e in estimates:
        assert e.ci_low <= e.value <= e.ci_high, e
        assert e.method
    threshold = math.log(report.k + 1)
    terms = report.theory_terms
    assert terms.vacuous_threshold == pytest.approx(threshold)
    for bound in (terms.finite_k_log, terms.prop1_upper, report.hoeffding_halfwidth):
        assert isinstance(bound, Bound)
        assert bound.vacuous == (bound.value > threshold)
    # Theorem 1's sample-variability term is a term (its complexity partner is not computable), not a bound
    assert isinstance(terms.sample_variability, Term) and terms.sample_variability.kind == "term"
    assert terms.sample_variability.vacuous == (terms.sample_variability.value > threshold)
    # every n in a bound counts queries (the i.i.d. unit), never anchors
    tau_eff = report.model.temperature_effective
    assert report.hoeffding_halfwidth.value == pytest.approx(
        bounds.hoeffding_halfwidth(tau_eff, report.n_test_queries, report.delta)
    )
    assert terms.sample_variability.value == pytest.approx(
        bounds.sample_variability_term(tau_eff, report.n_train_split_queries, report.delta)
    )
    assert {n.name for n in terms.not_computable} == {"finite_k_density_ratio", "complexity_penalty"}
    assert report.gap.value == pytest.approx(report.risk_test.value - report.risk_train.value)
    # the MI figures use the positives' marginal, so they are bounds or not computable, never capped wrong
    assert "other held-out queries" in report.mi_sampler
    if isinstance(report.mi_lower_bound_k, Estimate):
        assert report.mi_lower_bound_k.value <= math.log(report.k + 1) + 1e-9
    else:
        assert report.k > report.n_test_queries - 1 and report.mi_lower_bound_k.reason
    assert report.mi_cap_log_k_plus_1.value == pytest.approx(threshold)
    # a rejected fit has no intercept estimate
    assert isinstance(report.ce_inf_fit, Estimate) == report.fit.accepted
    # the k grid stays a fraction of the pool
    assert report.risk_vs_k[-1].k <= max(1, report.pool_size // K_POOL_FRACTION)
    if isinstance(report.ce_inf_corrected, Estimate):
        assert report.ce_inf_corrected.value >= report.ce_inf_plugin.value  # log μ̂ is biased low
    ks_ = report.k_sufficient
    lo, hi = (math.inf if x is None else x for x in (ks_.ci_low, ks_.ci_high))
    assert lo <= hi
    deltas = {row.k: row.delta.value for row in report.risk_vs_k}
    for row in report.risk_vs_k:
        assert row.delta.value == pytest.approx(row.risk.value - report.ce_inf_plugin.value)
    ks = report.k_sufficient
    if ks.k is None:
        assert ks.reason and any(abs(d) >= ks.eps for d in deltas.values())
    else:
        assert all(abs(d) < ks.eps for k, d in deltas.items() if k >= ks.k)


def test_report_on_a_small_corpus_is_complete_and_consistent(shared_encoder, tmp_path):
    train, test = _toy_splits()
    report = compute_report(shared_encoder, train, test, ReportOptions(k=7, n_boot=300, k_max=64, seed=3))
    _check_report(report)
    assert (report.n_train, report.n_test) == (9, 6)  # q-volcano has two positives
    assert (report.n_train_queries, report.n_test_queries, report.pool_size) == (8, 6, 24)
    assert report.model.metric == "cosine" and report.model.temperature == 0.05
    # 24 documents, at most 2 excluded per anchor: the grid stops at 22 // 8 = 2, whatever k_max says
    assert [row.k for row in report.risk_vs_k] == [1, 2]
    assert "N/8" in report.k_grid_rule
    assert any("exceeds 1/8 of the pool" in n for n in report.notes)  # k = 7 > 22 // 8
    assert isinstance(report.ce_inf_fit, NotComputable)  # two grid points: no accepted fit
    assert isinstance(report.mi_lower_bound_k, NotComputable)  # 7 negatives need 7 other test queries
    assert report.n_train_split_queries == 8
    assert report.retrieval is not None
    assert report.retrieval.ndcg_at_10_gap.value == pytest.approx(
        report.retrieval.train.ndcg_at_10 - report.retrieval.test.ndcg_at_10
    )
    path = write_report(report, tmp_path / "report")
    assert path.name == REPORT_FILE
    again = GapReport.model_validate_json(path.read_text())
    assert again == report
    assert again.plots == ["risk_vs_k.png", "train_vs_test.png"]
    for name in again.plots:
        assert (tmp_path / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((tmp_path / "report").glob(".*"))  # no temp files left behind
    # the legend sits outside the plotting area, so it hides neither the curve nor the CE∞ band
    fig = risk_vs_k_figure(report)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, area = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.y1 <= area.y0 or not legend.overlaps(area), (legend, area)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("CE∞ plug-in") for t in texts) and any("CE∞ 95% CI" in t for t in texts)


def _brute_ce_inf(encoder, data: RetrievalData, tau: float) -> float:
    ids = list(data.corpus)
    docs = encoder.encode([f"{d.title} {d.text}".strip() for d in data.corpus.values()])
    queries = encoder.encode(list(data.queries.values()), kind="query")
    terms = []
    for qi, qid in enumerate(data.queries):
        s = encoder.similarity_matrix(queries[qi : qi + 1], docs)[0].astype(np.float64)
        relevant = [ids.index(d) for d in data.qrels[qid]]
        pool = [s[j] for j in range(len(ids)) if j not in relevant]
        mu = np.mean(np.exp(np.array(pool) / tau))
        terms += [-s[c] / tau + math.log(mu) for c in relevant]
    return float(np.mean(terms))


def test_plugin_ce_inf_matches_a_brute_force_loop(shared_encoder):
    train, test = _toy_splits()
    encoder = Encoder(
        shared_encoder.model, Similarity(metric="cosine", temperature=0.1), source=shared_encoder.source
    )
    report = compute_report(encoder, train, test, ReportOptions(k=3, n_boot=200, k_max=8))
    assert report.ce_inf_plugin.value == pytest.approx(_brute_ce_inf(shared_encoder, test, 0.1), rel=1e-4)


def test_aninfonce_models_use_their_learned_similarity(base_encoder):
    rng = np.random.default_rng(0)
    lam = rng.uniform(5.0, 25.0, base_encoder.dim)
    base_encoder.similarity = Similarity(metric="aninfonce", temperature=None, lam=lam.tolist())
    train, test = _toy_splits()
    report = compute_report(base_encoder, train, test, ReportOptions(k=7, n_boot=200, k_max=16))
    _check_report(report)
    assert report.model.metric == "aninfonce"
    assert report.model.temperature == 1.0
    assert report.model.temperature_effective == pytest.approx(1.0 / lam.max())
    assert report.model.lambda_summary.max == pytest.approx(lam.max())
    assert report.ce_inf_plugin.value == pytest.approx(_brute_ce_inf(base_encoder, test, 1.0), rel=1e-4)
    assert report.mi_cap_two_over_tau.value == pytest.approx(2.0 * lam.max())
    assert report.theory_terms.finite_k_log.value == pytest.approx(math.log(1 + math.exp(2 * lam.max()) / 7))


def test_report_after_training_uses_the_training_k_and_reuses_given_embeddings(shared_encoder, tmp_path):
    train, test = _toy_splits()
    # another order than the corpus (rows matched by id), one document missing (encoded on the spot)
    ids = list(train.corpus)[::-1][:-1]
    emb = shared_encoder.encode([f"{train.corpus[i].title} {train.corpus[i].text}".strip() for i in ids])
    config = TrainConfig(batch_size=4, hard_negatives=0, random_negatives=2, seed=1)
    report = report_after_training(
        shared_encoder, train, test, config=config, doc_ids=ids, doc_embeddings=emb, out_dir=tmp_path
    )
    assert report.k == 3 + 2 and report.seed == 1
    assert "batch_size" in report.k_rule
    # with the trainer's log, the k the rows actually saw (deduplicated mined negatives, a short tail batch)
    config = TrainConfig(batch_size=4, hard_negatives=2, seed=1)  # upper bound 3 + 4·2 = 11
    log = [{"n_negatives": 9}, {"n_negatives": 8}, {"n_negatives": 5}]
    report = report_after_training(
        shared_encoder,
        train,
        test,
        config=config,
        doc_ids=ids,
        doc_embeddings=emb,
        out_dir=tmp_path,
        train_log=log,
    )
    assert report.k == 7 and "min 5, max 9" in report.k_rule and "upper bound is 11" in report.k_rule
    assert (tmp_path / "report" / REPORT_FILE).exists()
    assert report.ce_inf_plugin.value == pytest.approx(_brute_ce_inf(shared_encoder, test, 0.05), rel=1e-4)


def test_bad_settings_are_refused_with_the_field_named(shared_encoder, base_encoder):
    train, test = _toy_splits()
    with pytest.raises(ConfigError, match="k must be >= 1"):
        compute_report(shared_encoder, train, test, ReportOptions(k=0))
    base_encoder.similarity = Similarity(metric="cosine", temperature=None)
    with pytest.raises(ConfigError, match="temperature"):
        compute_report(base_encoder, train, test, ReportOptions(k=3))


def test_training_k_counts_every_negative_a_row_is_scored_against():
    assert training_k(TrainConfig(batch_size=32, hard_negatives=0)) == 31
    assert training_k(TrainConfig(batch_size=8, hard_negatives=1, random_negatives=5)) == 7 + 8 + 5


def test_actual_training_k_reads_the_log_and_falls_back_to_old_records():
    config = TrainConfig(batch_size=8, hard_negatives=1)
    assert actual_training_k([], config) == (training_k(config), K_RULE)
    k, rule = actual_training_k([{"n_negatives": 12}, {"n_negatives": 13}], config)
    assert k == 12 and "2 steps" in rule  # round(12.5) = 12 (banker's rounding)
    # logs written before n_negatives existed: batch_size − 1 + n_extra_negatives
    assert actual_training_k([{"n_extra_negatives": 6}], config)[0] == 7 + 6


def test_training_writes_the_report_and_the_cli_regenerates_it(demo_dataset, tmp_path):
    import torch

    from training.data.beir_slice import beir_slice
    from training.train.run_hooks import RunHooks
    from training.train.trainer import train

    data_dir = beir_slice(demo_dataset, tmp_path / "data", n_train=8, n_test=6, n_distractors=16)
    config = TrainConfig(
        max_seq_length=32, batch_size=4, max_steps=1, hard_negatives=0, random_negatives=1, seed=2
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two OpenMP threads stall on this shared 2-core machine
    try:
        train(config, data_dir, tmp_path / "run", hooks=RunHooks(show_progress=False))
    finally:
        torch.set_num_threads(threads)
    path = tmp_path / "run" / "report" / REPORT_FILE
    first = GapReport.model_validate_json(path.read_text())
    _check_report(first)
    # one step of a 4-pair batch + 1 random negative: the rows saw 3 + 1 negatives, as the log says
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["n_negatives"] for r in log] == [4]
    assert first.k == training_k(config) == 4 and first.seed == 2
    assert first.n_test == sum(len(r) for r in load_beir(data_dir, "test").qrels.values())
    assert first.theory_terms.finite_k_log.vacuous  # τ = 0.05: log(1 + e^40/4) ≫ log 5
    assert first.retrieval is not None and first.retrieval.test.n_queries == 6

    cmd = [sys.executable, "-m", "training", "report", "--data", str(data_dir), "--log-level", "WARNING"]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: --out is required unless --model is a training run folder (or its model/)"
    ]
    done = subprocess.run(
        [*cmd, "--model", str(tmp_path / "run")], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-2000:]
    again = GapReport.model_validate_json(path.read_text())
    _check_report(again)
    assert (again.k, again.seed, again.n_test) == (first.k, 2, first.n_test)
    assert again.risk_test.value == pytest.approx(
        first.risk_test.value, abs=1e-3
    )  # same model, seed, negatives
    assert again.created_at > first.created_at
    assert sorted(p.name for p in path.parent.iterdir()) == [REPORT_FILE, *again.plots]


def test_subset_helper_is_still_what_the_slice_test_expects():
    # guards the contract of training.data.query_sample.subset used above (queries keep their qrels)
    train, _ = _toy_splits()
    small = subset(train, n_queries=3, n_distractors=2, seed=0)
    assert len(small.queries) == 3 and all(q in small.qrels for q in small.queries)
