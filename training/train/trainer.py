"""The fine-tuning loop: base evaluation → (mine negatives) → InfoNCE/AnInfoNCE steps → save → evaluation.

A plain loop over the sentence-transformers model, readable top to bottom (nanoGPT habit): every knob
comes from `TrainConfig`, the config is saved with the artifacts, and one `train()` call does it all:

    base model ──evaluate(eval split)──► base metrics, corpus embeddings ──► mined hard negatives
    for each step: no-duplicate batch (+ random / hard negatives) → loss → backward (or GradCache)
                   → clip → AdamW (linear warmup/decay) → log, progress bar, on_progress callback
    save model + similarity.json ──evaluate(eval split)──► tuned metrics ──► gap report (optional)

Outputs in out_dir: model/, config.json, metrics.json, train_log.jsonl (and report/ when asked).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from contract.config import TrainConfig
from contract.encoding.encoder import Encoder, document_text
from training.cards.model_card import write_run_card
from training.data.pseudo_pairs import sentence_pairs
from training.data.retrieval_data import Pair, RetrievalData, training_pairs
from training.data.validation_carve import carve_validation
from training.eval.evaluate import EvalResult, evaluate
from training.hybrid.mode_metrics import ModeScorer
from training.train.budgeted import BudgetedTraining
from training.train.device import Precision, precision_for, resolve_device
from training.train.examples import (
    extra_negatives,
    limit_queries,
    mine_negatives,
    mining_corpus,
    title_pairs,
    with_pseudo_qrels,
    with_shown_negatives,
)
from training.train.freeze import freeze_lower_layers, thaw
from training.train.phase_timer import PhaseTimer, StepMeter, phase
from training.train.phases import Fitted, LiveReference, Run
from training.train.run_artifacts import TunedScores, gap_report, save_model, write_run_files
from training.train.run_hooks import RunHooks
from training.train.step import (
    build_loss,
    build_optimizer,
    linear_schedule,
    optimizer_step,
    plan_steps,
    report_progress,
    temperature_summary,
)

logger = logging.getLogger(__name__)

# (tuned encoder, its saved folder, the evaluation split, config) -> (what encodes the corpus, its record)
CorpusEncoderChoice = Callable[[Encoder, Path, RetrievalData, TrainConfig], tuple[Encoder, dict[str, Any]]]


@dataclass
class TrainResult:
    out_dir: Path
    model_dir: Path
    config_path: Path
    metrics_path: Path
    log_path: Path
    report_dir: Path | None
    base_metrics: dict[str, float]
    tuned_metrics: dict[str, float]
    train_seconds: float
    evaluation: EvalResult | None = None  # the tuned model's evaluation (its corpus embeddings are reused)
    base_evaluation: EvalResult | None = None  # the base model's (per-query values: paired comparisons)
    validation_metrics: dict[str, dict[str, float | int]] | None = (
        None  # {"base", "tuned"} on the held-out queries
    )


def train(
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    hooks: RunHooks | None = None,
    base_eval: EvalResult | None = None,
    reference: LiveReference | None = None,
    corpus_encoder: CorpusEncoderChoice | None = None,
) -> TrainResult:
    """Fine-tune `config.base_model` on `data_dir` (BEIR folder or pairs JSONL) and write out_dir.

    `hooks`: progress (every step; raising stops the run), bars, the phase timer (load, base encode, mine,
    train, tuned encode, report) and the on-disk corpus embeddings (training.eval.embedding_cache: an
    unchanged corpus is never encoded again by the base model, and the tuned model's encoding is there for
    indexing).
    `base_eval`: a previous `evaluate()` of the same base model on the same eval split (e.g. several
    runs over one dataset); it skips the base evaluation, whose corpus encoding is the costly part.
    `reference`: a live bundle over the same corpus; its vectors are the "before" evaluation and the mining
    ranking instead of a base-model corpus encode (so a retrain encodes the corpus once: the tuned model's).
    `corpus_encoder`: picks what encodes the tuned model's corpus (training/export/corpus_encoder.py, given
    by the pipeline and the CLI); None: torch.
    """
    out_dir, hooks = Path(out_dir), hooks or RunHooks()
    run = prepare(config, data_dir, out_dir, hooks, base_eval=base_eval, reference=reference)
    fitted = fit(run, config, hooks)
    return finalize(run, fitted, config, data_dir, out_dir, hooks, corpus_encoder=corpus_encoder)


def prepare(
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: Path,
    hooks: RunHooks,
    *,
    base_eval: EvalResult | None,
    reference: LiveReference | None = None,
) -> Run:
    """Data, base model, base evaluation, training pairs and (optionally) mined hard negatives."""
    show_progress, timer, cache = hooks.show_progress, hooks.timer, hooks.cache
    started = timer.started if timer is not None else time.perf_counter()  # a time budget counts from here
    device = resolve_device(config.device)  # before any work: `--device cuda` without a GPU fails at once
    precision = _precision(device, config, timer)
    out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(config.seed)
    rng = np.random.default_rng(config.seed)
    with phase(timer, "load data + model"):
        train_data = hooks.split(data_dir, config.train_split, seed=config.seed)
        train_data, val_data = carve_validation(train_data, config.validation_fraction, config.seed)
        eval_data = limit_queries(hooks.split(data_dir, config.eval_split, seed=config.seed), config)
        encoder = Encoder.load(config.base_model, device=str(device))
        # checked against the model's own depth before any encode; gradients back on after `fit`
        frozen = freeze_lower_layers(encoder.model, config.freeze_layers)
    # the encoder whose vectors `base` holds: the base model, or the live bundle's (no corpus encode)
    before, base_is = encoder, "base model"
    if reference is not None and reference.doc_ids == list(eval_data.corpus):
        before, base_is = reference.encoder, f"live bundle {reference.version}"
        with phase(timer, "evaluate (live bundle's vectors)"):
            base = evaluate(
                before, eval_data, doc_embeddings=reference.doc_embeddings, show_progress=show_progress
            )
    elif base_eval is not None and base_eval.doc_ids == list(eval_data.corpus):
        base = base_eval
    else:
        with phase(timer, "encode + evaluate (base)"):
            base = evaluate(encoder, eval_data, show_progress=show_progress, cache=cache)
    base_val = _validate(before, val_data, base)  # before training changes the model in place
    modes = ModeScorer(eval_data, val_data)  # dense / lexical / hybrid, base and tuned
    base_modes = modes.score(before, base.doc_embeddings)
    labelled = training_pairs(train_data)
    pseudo = _pseudo_pairs(train_data, config)
    pairs = labelled + pseudo
    doc_ids = list(train_data.corpus)
    position = {did: i for i, did in enumerate(doc_ids)}
    doc_texts = [document_text(train_data.corpus[d].title, train_data.corpus[d].text) for d in doc_ids]
    qrels = with_pseudo_qrels(train_data.qrels, pseudo)
    known = {qid: {position[d] for d in rel} for qid, rel in qrels.items()}
    mined: list[list[int]] = [[] for _ in pairs]
    if config.hard_negatives:
        with phase(timer, "mine negatives"):
            corpus = mining_corpus(before, train_data, base, show_progress=show_progress, cache=cache)
            mined = mine_negatives(before, pairs, corpus, position, known, config, rng)
    mined = with_shown_negatives(mined, pairs, train_data.negatives, position, known)
    return Run(
        device, precision, rng, train_data, eval_data, encoder, encoder.source, encoder.model.max_seq_length,
        base, pairs, len(pseudo), doc_texts, position, qrels, known, mined,
        val_data=val_data, base_val=base_val, modes=modes, base_modes=base_modes, base_is=base_is,
        started=started, frozen=frozen,
    )  # fmt: skip


def _precision(device: torch.device, config: TrainConfig, timer: PhaseTimer | None) -> Precision:
    """The step's precision (training/train/device.py); timings.json says what ran and why."""
    precision = precision_for(device, config.cpu_bf16)
    if timer is not None:
        timer.notes |= {"precision": precision.name, "precision_why": precision.why}
    return precision


def _pseudo_pairs(train_data: RetrievalData, config: TrainConfig) -> list[Pair]:
    """The corpus's unsupervised pairs: titles, then sentences, each from its own seeded stream."""
    pseudo = title_pairs(train_data, config.corpus_title_pairs, np.random.default_rng([config.seed, 1]))
    return pseudo + sentence_pairs(
        train_data, config.corpus_sentence_pairs, np.random.default_rng([config.seed, 2])
    )


def fit(run: Run, config: TrainConfig, hooks: RunHooks) -> Fitted:
    """The loop: no-duplicate batches (+ random / hard negatives) → loss → backward → AdamW, logged."""
    on_progress, show_progress, timer = hooks.on_progress, hooks.show_progress, hooks.timer
    model = run.encoder.model
    loss_fn = build_loss(config, run.encoder.dim).to(run.device)
    optimizer = build_optimizer(model, loss_fn, config)
    epochs, total_steps, warmup = plan_steps(run, config)
    budget = BudgetedTraining.start(run, config, hooks, total_steps)  # None without a time budget
    schedule = {"total": total_steps}  # a budget re-fits it to the steps the time left holds
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_schedule(s, warmup, schedule["total"])
    )
    log: list[dict[str, Any]] = []
    model.max_seq_length = config.max_seq_length  # training truncation only: the cost is in the long docs
    model.train()
    start = time.perf_counter()
    bar = tqdm(total=total_steps, desc="train", disable=not show_progress)
    meter = StepMeter("train steps", total_steps, timer)  # logs steps/s and the time left while it runs
    step = 0
    for epoch, batches in enumerate(epochs):
        for batch in batches:
            if step >= schedule["total"] or (budget is not None and not budget.room_for_step()):
                break
            extra = extra_negatives(
                batch, run.pairs, run.mined, run.known, run.position, len(run.doc_texts), config, run.rng
            )
            queries = [run.pairs[i].query for i in batch]
            positives = [run.pairs[i].positive for i in batch]
            groups = [queries, positives, [run.doc_texts[j] for j in extra]]
            loss = optimizer_step(model, loss_fn, optimizer, groups, config, run.precision)
            scheduler.step()
            step += 1
            record = {
                "step": step,
                "epoch": epoch,
                "loss": float(loss),
                "lr": scheduler.get_last_lr()[0],
                "n_extra_negatives": len(extra),
                "n_negatives": len(batch) - 1 + len(extra),  # the k this step's rows saw (gap report)
                **temperature_summary(loss_fn),
                "elapsed_s": round(time.perf_counter() - start, 3),
            }
            log.append(record)
            bar.set_postfix(loss=f"{record['loss']:.4f}", tau=f"{record['temperature']:.4f}")
            bar.update(1)
            meter.step()
            if budget is not None:
                schedule["total"] = meter.total = bar.total = budget.after_step(
                    step, model, loss_fn, record["elapsed_s"]
                )
            report_progress(on_progress, record, time.perf_counter() - start, schedule["total"])
    bar.close()
    meter.close()
    budget_record = budget.finish(model, loss_fn, time.perf_counter() - start) if budget is not None else None
    train_seconds = time.perf_counter() - start
    _record_time(timer, train_seconds, budget_record)
    thaw(run.frozen)
    model.eval()
    model.max_seq_length = run.eval_seq_length
    return Fitted(loss_fn, log, train_seconds, budget_record)


def finalize(
    run: Run,
    fitted: Fitted,
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: Path,
    hooks: RunHooks,
    *,
    corpus_encoder: CorpusEncoderChoice | None = None,
) -> TrainResult:
    """Save the tuned model, evaluate it, write config.json, metrics.json, train_log.jsonl and the report."""
    show_progress, timer, cache = hooks.show_progress, hooks.timer, hooks.cache
    tuned_encoder = Encoder(run.encoder.model, fitted.loss_fn.similarity(), source=str(out_dir / "model"))
    model_dir = save_model(tuned_encoder, out_dir / "model")
    documents, corpus_record = tuned_encoder, None
    if corpus_encoder is not None:
        with phase(timer, "choose corpus encoder"):  # torch or its ONNX export, measured here
            documents, corpus_record = corpus_encoder(tuned_encoder, model_dir, run.eval_data, config)
    with phase(timer, "encode + evaluate (tuned)"):  # the one corpus encode; the index reuses it
        tuned = evaluate(documents, run.eval_data, show_progress=show_progress, cache=cache)
        tuned_val = _validate(tuned_encoder, run.val_data, tuned) if run.val_data is not None else {}
        tuned_modes = run.modes.score(tuned_encoder, tuned.doc_embeddings) if run.modes is not None else None
    validation = {"base": run.base_val, "tuned": tuned_val} if run.base_val and tuned_val else {}
    scores = TunedScores(tuned, validation, tuned_modes, corpus_record)
    paths = write_run_files(run, fitted, config, data_dir, out_dir, scores)
    with phase(timer, "gap report"):
        report_dir = gap_report(
            tuned_encoder, run.train_data, run.eval_data, tuned, config, out_dir, fitted.log
        )
    write_run_card(
        out_dir
    )  # model/README.md: a true card instead of the base model's (training/cards/model_card.py)
    logger.info(
        "nDCG@10 %.4f → %.4f in %.0fs of training",
        run.base.metrics["ndcg@10"],
        tuned.metrics["ndcg@10"],
        fitted.train_seconds,
    )
    return TrainResult(
        out_dir=out_dir,
        model_dir=model_dir,
        config_path=paths[0],
        metrics_path=paths[1],
        log_path=paths[2],
        report_dir=report_dir,
        base_metrics=run.base.metrics,
        tuned_metrics=tuned.metrics,
        train_seconds=fitted.train_seconds,
        evaluation=tuned,
        base_evaluation=run.base,
        validation_metrics=validation or None,
    )


def _record_time(timer: PhaseTimer | None, train_seconds: float, budget: dict[str, Any] | None) -> None:
    """The loop's seconds in the phase table, and a time budget's record in timings.json."""
    if timer is None:
        return
    timer.add("train steps", train_seconds)
    if budget is not None:
        timer.notes["time_budget"] = budget


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _validate(encoder: Encoder, val: RetrievalData, evaluation: EvalResult) -> dict[str, float | int]:
    """Metrics on the held-out training queries, from the corpus encoding `evaluation` already made."""
    if not val.queries or evaluation.doc_ids != list(val.corpus):
        return {}  # no validation split, or a corpus the evaluation did not encode (pairs files)
    return evaluate(encoder, val, doc_embeddings=evaluation.doc_embeddings, show_progress=False).summary()
