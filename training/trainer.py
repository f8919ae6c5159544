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

import json
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

from contract.atomic import write_json_atomic, write_text_atomic
from contract.config import TrainConfig
from contract.encoder import Encoder, document_text
from training.data import Pair, RetrievalData, load_split, training_pairs
from training.device import Precision, precision_for, resolve_device
from training.embedding_cache import EmbeddingCache
from training.evaluate import EvalResult, evaluate
from training.losses.an_info_nce import AnInfoNCELoss
from training.losses.info_nce import InfoNCELoss
from training.negatives import no_duplicate_batches
from training.run_artifacts import gap_report, run_config, save_model
from training.timing import PhaseTimer, phase
from training.train_examples import (
    extra_negatives,
    limit_queries,
    mine_negatives,
    title_pairs,
    with_pseudo_qrels,
)
from training.train_step import (
    build_loss,
    build_optimizer,
    linear_schedule,
    optimizer_step,
    temperature_summary,
)

logger = logging.getLogger(__name__)

ProgressFn = Callable[[dict[str, Any]], None]


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


def train(
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    on_progress: ProgressFn | None = None,
    show_progress: bool = True,
    base_eval: EvalResult | None = None,
    timer: PhaseTimer | None = None,
    cache: EmbeddingCache | None = None,
) -> TrainResult:
    """Fine-tune `config.base_model` on `data_dir` (BEIR folder or pairs JSONL) and write out_dir.

    `base_eval`: a previous `evaluate()` of the same base model on the same eval split (e.g. several
    runs over one dataset); it skips the base evaluation, whose corpus encoding is the costly part.
    `timer`: records the wall time of each phase (load, base encode, mine, train, tuned encode, report).
    `cache`: on-disk corpus embeddings (training.embedding_cache): an unchanged corpus is never encoded
    again by the base model, and the tuned model's encoding is there for indexing.
    """
    out_dir = Path(out_dir)
    run = prepare(
        config, data_dir, out_dir, show_progress=show_progress, base_eval=base_eval, timer=timer, cache=cache
    )
    fitted = fit(run, config, on_progress=on_progress, show_progress=show_progress, timer=timer)
    return finalize(
        run, fitted, config, data_dir, out_dir, show_progress=show_progress, timer=timer, cache=cache
    )


@dataclass
class Run:
    """What `prepare` hands the loop: data, the base model and its evaluation, and the training examples."""

    device: torch.device
    precision: Precision
    rng: np.random.Generator
    train_data: RetrievalData
    eval_data: RetrievalData
    encoder: Encoder
    base_source: str
    eval_seq_length: int  # evaluation and the saved model keep the base model's limit
    base: EvalResult
    pairs: list[Pair]  # labelled pairs, then corpus-title pseudo-pairs
    n_pseudo: int
    doc_texts: list[str]  # corpus position -> document_text
    position: dict[str, int]  # document id -> corpus position
    qrels: dict[str, dict[str, int]]  # with each pseudo-query's own document
    known: dict[str, set[int]]  # query id -> positions of its known positives (never negatives)
    mined: list[list[int]]  # per pair: mined hard-negative positions


@dataclass
class Fitted:
    loss_fn: InfoNCELoss | AnInfoNCELoss
    log: list[dict[str, Any]]
    train_seconds: float


def prepare(
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: Path,
    *,
    show_progress: bool,
    base_eval: EvalResult | None,
    timer: PhaseTimer | None,
    cache: EmbeddingCache | None,
) -> Run:
    """Data, base model, base evaluation, training pairs and (optionally) mined hard negatives."""
    device = resolve_device(config.device)  # before any work: `--device cuda` without a GPU fails at once
    precision = precision_for(device)
    out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(config.seed)
    rng = np.random.default_rng(config.seed)
    with phase(timer, "load data + model"):
        train_data = load_split(data_dir, config.train_split, seed=config.seed)
        eval_data = limit_queries(load_split(data_dir, config.eval_split, seed=config.seed), config)
        encoder = Encoder.load(config.base_model, device=str(device))
    if base_eval is not None and base_eval.doc_ids == list(eval_data.corpus):
        base = base_eval
    else:
        with phase(timer, "encode + evaluate (base)"):
            base = evaluate(encoder, eval_data, show_progress=show_progress, cache=cache)
    labelled = training_pairs(train_data)
    pseudo = title_pairs(train_data, config.corpus_title_pairs, np.random.default_rng([config.seed, 1]))
    pairs = labelled + pseudo
    doc_ids = list(train_data.corpus)
    position = {did: i for i, did in enumerate(doc_ids)}
    doc_texts = [document_text(train_data.corpus[d].title, train_data.corpus[d].text) for d in doc_ids]
    qrels = with_pseudo_qrels(train_data.qrels, pseudo)
    known = {qid: {position[d] for d in rel} for qid, rel in qrels.items()}
    mined: list[list[int]] = [[] for _ in pairs]
    if config.hard_negatives:
        with phase(timer, "mine negatives"):
            mined = mine_negatives(
                encoder, pairs, train_data, base, position, known, config, rng, show_progress, cache
            )
    return Run(
        device, precision, rng, train_data, eval_data, encoder, encoder.source, encoder.model.max_seq_length,
        base, pairs, len(pseudo), doc_texts, position, qrels, known, mined,
    )  # fmt: skip


def fit(
    run: Run,
    config: TrainConfig,
    *,
    on_progress: ProgressFn | None,
    show_progress: bool,
    timer: PhaseTimer | None,
) -> Fitted:
    """The loop: no-duplicate batches (+ random / hard negatives) → loss → backward → AdamW, logged."""
    model = run.encoder.model
    loss_fn = build_loss(config, run.encoder.dim).to(run.device)
    optimizer = build_optimizer(model, loss_fn, config)
    epochs, total_steps, warmup = plan_steps(run, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_schedule(s, warmup, total_steps)
    )
    log: list[dict[str, Any]] = []
    model.max_seq_length = config.max_seq_length  # training truncation only: the cost is in the long docs
    model.train()
    start = time.perf_counter()
    bar = tqdm(total=total_steps, desc="train", disable=not show_progress)
    step = 0
    for epoch, batches in enumerate(epochs):
        for batch in batches:
            if step >= total_steps:
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
            _progress(on_progress, record, time.perf_counter() - start, total_steps)
    bar.close()
    train_seconds = time.perf_counter() - start
    if timer is not None:
        timer.seconds["train steps"] = timer.seconds.get("train steps", 0.0) + train_seconds
    model.eval()
    model.max_seq_length = run.eval_seq_length
    return Fitted(loss_fn, log, train_seconds)


def plan_steps(run: Run, config: TrainConfig) -> tuple[list[list[list[int]]], int, int]:
    """Every epoch's batches (drawn up front, seeded), the number of steps and of warmup steps."""
    epochs = [
        no_duplicate_batches(
            [p.query_id for p in run.pairs],
            [p.positive_id for p in run.pairs],
            config.batch_size,
            run.rng,
            positives={q: set(r) for q, r in run.qrels.items()},
        )
        for _ in range(config.epochs)
    ]
    total_steps = sum(len(e) for e in epochs)
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    warmup = int(config.warmup_ratio * total_steps)
    logger.info(
        "training on %d pairs (%d from corpus titles): %d epochs, %d steps of %d pairs (%d warmup), loss %s, "
        "on %s (%s)",
        len(run.pairs),
        run.n_pseudo,
        config.epochs,
        total_steps,
        config.batch_size,
        warmup,
        config.loss,
        run.device,
        run.precision.name,
    )
    return epochs, total_steps, warmup


def _progress(
    on_progress: ProgressFn | None, record: dict[str, Any], elapsed: float, total_steps: int
) -> None:
    if on_progress is None:
        return
    step = record["step"]
    on_progress(
        {
            "step": step,
            "total_steps": total_steps,
            "epoch": record["epoch"],
            "loss": record["loss"],
            "temperature": record["temperature"],
            "eta_s": elapsed / step * (total_steps - step),
        }
    )


def finalize(
    run: Run,
    fitted: Fitted,
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: Path,
    *,
    show_progress: bool,
    timer: PhaseTimer | None,
    cache: EmbeddingCache | None,
) -> TrainResult:
    """Save the tuned model, evaluate it, write config.json, metrics.json, train_log.jsonl and the report."""
    tuned_encoder = Encoder(run.encoder.model, fitted.loss_fn.similarity(), source=str(out_dir / "model"))
    model_dir = save_model(tuned_encoder, out_dir / "model")
    with phase(timer, "encode + evaluate (tuned)"):
        tuned = evaluate(tuned_encoder, run.eval_data, show_progress=show_progress, cache=cache)
    config_path = write_json_atomic(
        out_dir / "config.json",
        run_config(config, run.base_source, fitted.loss_fn, data_dir, (len(run.pairs), run.n_pseudo), tuned),
        newline=True,
    )
    metrics_path = write_json_atomic(
        out_dir / "metrics.json",
        {
            "base": run.base.summary(),
            "tuned": tuned.summary(),
            "train_seconds": round(fitted.train_seconds, 3),
        },
        newline=True,
    )
    log_path = write_text_atomic(
        out_dir / "train_log.jsonl", "".join(json.dumps(r) + "\n" for r in fitted.log)
    )
    with phase(timer, "gap report"):
        report_dir = gap_report(
            tuned_encoder, run.train_data, run.eval_data, tuned, config, out_dir, fitted.log
        )
    logger.info(
        "nDCG@10 %.4f → %.4f in %.0fs of training",
        run.base.metrics["ndcg@10"],
        tuned.metrics["ndcg@10"],
        fitted.train_seconds,
    )
    return TrainResult(
        out_dir=out_dir,
        model_dir=model_dir,
        config_path=config_path,
        metrics_path=metrics_path,
        log_path=log_path,
        report_dir=report_dir,
        base_metrics=run.base.metrics,
        tuned_metrics=tuned.metrics,
        train_seconds=fitted.train_seconds,
        evaluation=tuned,
        base_evaluation=run.base,
    )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
