"""GradCache: the exact InfoNCE gradient of a large batch with the activation memory of a small one.

Gao, Zhang, Han, Callan 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup"
(arXiv 2101.06983); the same scheme as sentence-transformers' CachedMultipleNegativesRankingLoss.

The contrastive loss couples every row of the batch, but it depends on the encoder only through the
embeddings. So:

1. embed every text in mini-batches without a graph and remember each mini-batch's RNG state;
2. compute the loss on those cached embeddings (made leaf tensors) and backpropagate to them:
   this gives dL/de for every row, and the gradients of the loss's own parameters (τ, Λ);
3. re-embed each mini-batch *with* a graph under the same RNG state (so dropout draws the same mask)
   and backpropagate the cached dL/de through it (a vector-Jacobian product per mini-batch).

Parameter gradients accumulate over the mini-batches into exactly the gradient of the full-batch loss;
peak activation memory is one mini-batch's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

EmbedFn = Callable[[Sequence[str]], Tensor]  # texts -> (n, D) embeddings, differentiable


class _RngState:
    """CPU (and, when present, CUDA) RNG state captured before a forward pass, replayable later."""

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def cached_loss_backward(
    embed: EmbedFn,
    groups: Sequence[Sequence[str]],
    loss_fn: Callable[..., Tensor],
    *,
    mini_batch_size: int,
) -> Tensor:
    """Run loss_fn(*embeddings of each text group) and backpropagate into `embed`'s parameters.

    `groups` are e.g. (queries, positives, extra documents); empty groups reach loss_fn as None.
    Returns the detached loss. Gradients are accumulated (call optimizer.zero_grad() before).
    """
    if mini_batch_size < 1:
        raise ValueError("mini_batch_size must be >= 1")
    chunks: list[list[tuple[Sequence[str], _RngState]]] = []
    cached: list[Tensor | None] = []
    # 1. embeddings without a graph
    with torch.no_grad():
        for texts in groups:
            group_chunks = []
            parts = []
            for start in range(0, len(texts), mini_batch_size):
                part = texts[start : start + mini_batch_size]
                state = _RngState()
                parts.append(embed(part))  # (m, D)
                group_chunks.append((part, state))
            chunks.append(group_chunks)
            cached.append(torch.cat(parts).requires_grad_(True) if parts else None)  # (n, D)
    # 2. loss and dL/d(embedding) on the cached leaves
    with torch.enable_grad():
        loss = loss_fn(*cached)
        loss.backward()
    # 3. replay each mini-batch with a graph and push the cached gradient through it
    after = _RngState()  # the caller's RNG stream continues as if each text had been embedded once
    for group_chunks, leaf in zip(chunks, cached, strict=True):
        if leaf is None or leaf.grad is None:
            continue
        offset = 0
        for part, state in group_chunks:
            state.restore()
            emb = embed(part)  # (m, D), with a graph
            grad = leaf.grad[offset : offset + len(part)]  # (m, D)
            emb.backward(grad)  # accumulates Σ_rows grad · d(emb)/dθ into the encoder's .grad
            offset += len(part)
    after.restore()
    return loss.detach()
