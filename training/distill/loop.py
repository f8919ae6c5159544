"""The distillation loop: the student's query tower trained with InfoNCE against fixed document vectors."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from training.data.progress import report
from training.distill.config import DistillConfig
from training.distill.pairs import DistillPairs
from training.losses.info_nce import info_nce_loss
from training.train.negatives import no_duplicate_batches

logger = logging.getLogger(__name__)
PHASE = "distill static query encoder"  # its steps, as a job's progress names them


@dataclass
class Student:
    """A student ready for `fit_student`: the model, what trains, its optimiser and epochs."""

    model: Any
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    epochs: int
    info: dict[str, Any] = field(default_factory=dict)  # recorded with the variant
    saved_len: int | None = None  # `distilled`: the model's max_seq_length, restored before saving
    # `static`: (vocab,) bool, the tokens of the texts it was distilled on, saved beside it for the router
    seen_tokens: np.ndarray | None = None


@dataclass
class DistillTargets:
    """What a student learns from: the pairs, the fixed document vectors, the teacher's query vectors and
    each pair's mined negatives (corpus rows)."""

    pairs: DistillPairs
    doc_emb: np.ndarray  # (n_docs, D) float32, fixed
    teacher_q: np.ndarray  # (n_pairs, D) the full encoder's vectors of pairs.texts
    negatives: list[list[int]]


def student_loss(
    student_q: torch.Tensor,
    teacher_q: torch.Tensor,
    docs: torch.Tensor,
    extra: torch.Tensor | None,
    *,
    temperature: float,
    match_weight: float,
) -> torch.Tensor:
    """InfoNCE of student queries (B, D) against fixed docs (B, D) + extra (M, D); plus the matching term."""
    loss = info_nce_loss(student_q, docs, temperature=temperature, extra_docs=extra)
    if match_weight > 0:
        loss = loss + match_weight * (1.0 - F.cosine_similarity(student_q, teacher_q, dim=-1)).mean()
    return loss


def fit_student(
    student: Student,
    targets: DistillTargets,
    *,
    temperature: float,
    config: DistillConfig,
    rng: np.random.Generator,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The readable loop: batches without repeated queries or positives, one InfoNCE step each.

    `on_step(step)` runs after every step (bench/distill/distill_search.py scores a validation curve with it).
    """
    model, pairs, negatives = student.model, targets.pairs, targets.negatives
    batches_per_epoch = [
        no_duplicate_batches(pairs.keys, pairs.positives, config.batch_size, rng, positives=pairs.known)
        for _ in range(student.epochs)
    ]
    total = sum(len(b) for b in batches_per_epoch)
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    scheduler = _warmup_then_linear(student.optimizer, total)
    docs_t, teacher_t = read_only_tensor(targets.doc_emb), read_only_tensor(targets.teacher_q)
    model.train()
    step, losses, started = 0, [], time.perf_counter()
    for batches in batches_per_epoch:
        for batch in batches:
            if step >= total:
                break
            extra_pos = sorted({j for i in batch for j in negatives[i]})
            extra = docs_t[extra_pos] if extra_pos else None  # (M, D), fixed
            loss = _student_step(
                student,
                scheduler,
                [pairs.texts[i] for i in batch],
                (teacher_t[batch], docs_t[[pairs.positives[i] for i in batch]], extra),
                temperature=temperature,
                match_weight=config.match_weight,
            )
            losses.append(loss)
            step += 1
            if on_step is not None:
                on_step(step)
            report(PHASE, step, total)
            if step % 50 == 0:
                logger.info("step %d/%d loss %.4f", step, total, float(np.mean(losses[-50:])))
    model.eval()
    return {"steps": step, "seconds": round(time.perf_counter() - started, 1), **_loss_summary(losses)}


def read_only_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing `array`'s memory, also when it is a read-only memory map (the corpus vectors): the
    loop only reads these targets, so sharing beats copying the corpus's vectors, and torch's "the given
    NumPy array is not writable" warning, which every demo index logged, says nothing here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def _warmup_then_linear(optimizer: torch.optim.Optimizer, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The trainer's schedule: linear warm-up over the first tenth of the steps, then linear decay."""
    from training.train.step import linear_schedule

    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_schedule(s, max(1, total // 10), total)
    )


def _student_step(
    student: Student,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    texts: list[str],
    targets: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    *,
    temperature: float,
    match_weight: float,
) -> float:
    """One optimiser step on one batch of texts, against (teacher vectors (B, D), positives (B, D), extra
    negatives (M, D) or None); returns the batch loss."""
    from training.train.step import embed

    q = embed(student.model, texts)  # (B, D)
    teacher, positives, extra = targets
    loss = student_loss(q, teacher, positives, extra, temperature=temperature, match_weight=match_weight)
    student.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if not any(p.grad is not None and p.grad.is_sparse for p in student.params):  # clipping needs dense grads
        torch.nn.utils.clip_grad_norm_(student.params, 1.0)
    student.optimizer.step()
    scheduler.step()
    return float(loss.detach())


def _loss_summary(losses: list[float]) -> dict[str, float | None]:
    """Mean loss of the first and the last ten steps (None without steps)."""
    return {
        "loss_first": round(float(np.mean(losses[:10])), 4) if losses else None,
        "loss_last": round(float(np.mean(losses[-10:])), 4) if losses else None,
    }
