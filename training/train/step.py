"""One optimiser step and its parts: the loss, AdamW with its parameter groups, the planned batches and
the linear schedule, embedding with gradients, and the temperature the loop logs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from contract.config import TrainConfig
from training.losses.an_info_nce import AnInfoNCELoss
from training.losses.info_nce import InfoNCELoss
from training.train.device import Precision
from training.train.grad_cache import cached_loss_backward
from training.train.negatives import no_duplicate_batches
from training.train.phases import Run

logger = logging.getLogger(__name__)

ProgressFn = Callable[[dict[str, Any]], None]


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
    groups += loss_fn.param_groups(config.lambda_lr)  # learned τ or Λ; none for a fixed τ
    return torch.optim.AdamW(groups, lr=config.lr)


def embed(model: Any, texts: Sequence[str]) -> Tensor:
    """Differentiable embeddings of texts: (n, D), L2-normalised like Encoder.encode."""
    from sentence_transformers.util import batch_to_device

    features = batch_to_device(model.preprocess(list(texts)), model.device)  # tokens, truncated
    return F.normalize(model(features)["sentence_embedding"], dim=-1)  # (n, D)


def optimizer_step(
    model: Any,
    loss_fn: InfoNCELoss | AnInfoNCELoss,
    optimizer: torch.optim.Optimizer,
    groups: list[list[str]],
    config: TrainConfig,
    precision: Precision | None = None,
) -> Tensor:
    """One optimiser step on (queries, positives, extra negatives); returns the detached loss.

    `precision`: autocast for the encoder's forward passes (cuda, or cpu with cpu_bf16); the weights stay
    fp32 and the loss runs in fp32 on the normalised embeddings; an fp16 grad scaler scales the backward
    pass and unscales before clipping.
    """
    precision = precision or Precision(torch.device("cpu"), None)
    # GradCache runs its own backward passes, unscaled: with fp16 it goes without the scaler
    scaler = None if config.grad_cache else precision.scaler
    optimizer.zero_grad(set_to_none=True)
    if config.grad_cache:

        def embed_fp32(texts: Sequence[str]) -> Tensor:  # autocast for the encoder only: the loss stays fp32
            with precision.autocast():
                return embed(model, texts).float()

        loss = cached_loss_backward(embed_fp32, groups, loss_fn, mini_batch_size=config.mini_batch_size)
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


def temperature_summary(loss_fn: InfoNCELoss | AnInfoNCELoss) -> dict[str, Any]:
    """The log's `temperature`: `Similarity.effective_temperature()` of the model as it stands (τ for
    InfoNCE, 1/max Λ for AnInfoNCE), plus Λ's range for AnInfoNCE."""
    similarity = loss_fn.similarity()
    summary = similarity.lambda_summary()
    return {
        "temperature": similarity.effective_temperature(),
        **({"lambda": summary} if summary is not None else {}),
    }


def plan_steps(run: Run, config: TrainConfig) -> tuple[list[list[list[int]]], int, int]:
    """Every epoch's batches (drawn up front, seeded), the number of steps and of warmup steps."""
    epochs = [
        no_duplicate_batches(
            [p.query_id for p in run.pairs],
            [p.positive_id for p in run.pairs],
            config.batch_size,
            run.rng,
            positives={q: set(r) for q, r in run.qrels.items()},
            lengths=[len(p.positive) for p in run.pairs],
            buckets=config.length_buckets,
        )
        for _ in range(config.epochs)
    ]
    total_steps = sum(len(e) for e in epochs)
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    warmup = int(config.warmup_ratio * total_steps)
    logger.info(
        "training on %d pairs (%d corpus pseudo-pairs): %d epochs, %d steps of %d pairs (%d warmup), loss %s, "
        "on %s (%s: %s)",
        len(run.pairs),
        run.n_pseudo,
        config.epochs,
        total_steps,
        config.batch_size,
        warmup,
        config.loss,
        run.device,
        run.precision.name,
        run.precision.why,
    )
    return epochs, total_steps, warmup


def report_progress(
    on_progress: ProgressFn | None, record: dict[str, Any], elapsed: float, total_steps: int
) -> None:
    """The loop's per-step event for `on_progress` (jobs show it): step, loss, temperature, ETA."""
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
