"""AnInfoNCE: InfoNCE with a learned diagonal concentration Λ (Rusak et al. 2024/25, arXiv 2407.00143).

The pair score of normalised embeddings u, v is

    s(u, v) = -½ (u - v)ᵀ diag(Λ) (u - v) = -½ Σ_c Λ_c (u_c - v_c)²,     Λ = softplus(w) > 0,

and the loss is the cross-entropy of row i of s(q_i, candidates) against column i, exactly like InfoNCE
(Rusak et al. 2024/25, arXiv 2407.00143; the ½ follows the official code, whose positives are drawn from p(z⁺|z) ∝ e^{-½ dᵀΛd}).
Λ is a per-dimension inverse temperature: on the sphere -½ λ ‖u - v‖² = λ⟨u, v⟩ - λ, and the constant
cancels in the softmax, so Λ = λ·1 is plain InfoNCE at τ = 1/λ. Serving searches L2 on √Λ ⊙ e
(contract.encoding.encoder.Encoder.to_index_space).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contract.encoding.similarity import DEFAULT_TEMPERATURE, Similarity
from contract.errors import ConfigError

logger = logging.getLogger(__name__)


def an_info_nce_loss(
    q: Tensor,
    d: Tensor,
    lam: Tensor,
    *,
    extra_docs: Tensor | None = None,
    symmetric: bool = False,
) -> Tensor:
    """Mean AnInfoNCE loss (nats) of anchors `q` (B, D) against positives `d` (B, D), extra negatives (M, D).

    `lam` (D,) must be positive. Rows are re-normalised (idempotent on normalised input) because the
    score is only a similarity on the sphere.
    """
    if q.ndim != 2 or q.shape != d.shape:
        raise ValueError(f"q {tuple(q.shape)} and d {tuple(d.shape)} must both be (batch, dim)")
    if lam.shape != (q.shape[1],):
        raise ValueError(f"lam must have shape ({q.shape[1]},), got {tuple(lam.shape)}")
    if extra_docs is not None and (extra_docs.ndim != 2 or extra_docs.shape[1] != q.shape[1]):
        raise ValueError(f"extra_docs must be (M, {q.shape[1]}); got {tuple(extra_docs.shape)}")
    q = F.normalize(q, dim=-1)  # (B, D)
    d = F.normalize(d, dim=-1)  # (B, D)
    candidates = d if extra_docs is None else torch.cat([d, F.normalize(extra_docs, dim=-1)])  # (B + M, D)
    logits = pair_scores(q, candidates, lam)  # (B, B + M)
    rows = torch.arange(q.shape[0], device=q.device)
    loss = F.cross_entropy(logits, rows)
    if symmetric:
        # doc→query among the B queries; the score is symmetric, so this is the transposed square block
        back = F.cross_entropy(logits[:, : q.shape[0]].T, rows)
        return 0.5 * (loss + back)
    return loss


def pair_scores(a: Tensor, b: Tensor, lam: Tensor) -> Tensor:
    """-½ Σ_c Λ_c (a_ic - b_jc)² for a (n, D), b (m, D): (n, m), via the expansion (one matmul)."""
    a_sq = (a * a * lam).sum(dim=1)  # (n,)
    b_sq = (b * b * lam).sum(dim=1)  # (m,)
    return (a * lam) @ b.T - 0.5 * a_sq[:, None] - 0.5 * b_sq[None, :]  # (n, m)


def inverse_softplus(y: Tensor) -> Tensor:
    """w with softplus(w) = y, stable for large y (log(e^y - 1) = y + log(1 - e^{-y}))."""
    return y + torch.log(-torch.expm1(-y))


class AnInfoNCELoss(nn.Module):
    """Holds w (D,), Λ = softplus(w), initialised to Λ = 1/τ₀ · 1 (isotropic InfoNCE at τ₀).

    Give w its own learning rate (the official code uses 10x the encoder's) via `param_groups`.
    """

    def __init__(
        self, dim: int, *, init_temperature: float = DEFAULT_TEMPERATURE, symmetric: bool = False
    ) -> None:
        super().__init__()
        if dim < 1:
            raise ConfigError(f"AnInfoNCE needs the embedding dimension (>= 1), got {dim}")
        if not init_temperature > 0:
            raise ConfigError(f"init_temperature must be > 0, got {init_temperature}")
        self.dim = dim
        self.init_temperature = init_temperature
        self.symmetric = symmetric
        self.w = nn.Parameter(
            inverse_softplus(torch.full((dim,), 1.0 / init_temperature, dtype=torch.float64)).float()
        )

    def lam_tensor(self) -> Tensor:
        return F.softplus(self.w)  # (D,)

    def forward(self, q: Tensor, d: Tensor, extra_docs: Tensor | None = None) -> Tensor:
        return an_info_nce_loss(q, d, self.lam_tensor(), extra_docs=extra_docs, symmetric=self.symmetric)

    @property
    def lam(self) -> np.ndarray:
        return self.lam_tensor().detach().cpu().double().numpy()

    def param_groups(self, lambda_lr: float) -> list[dict[str, Any]]:
        """Optimizer parameter group for w with its own learning rate."""
        return [{"params": [self.w], "lr": lambda_lr, "weight_decay": 0.0}]

    def similarity(self) -> Similarity:
        """What serving must use: the learned Λ (L2 search on √Λ-scaled vectors)."""
        return Similarity(
            metric="aninfonce", temperature=None, learned=True, lam=[float(x) for x in self.lam]
        )

    def get_config_dict(self) -> dict[str, Any]:
        lam = self.lam
        return {
            "loss": "aninfonce",
            "dim": self.dim,
            "init_temperature": self.init_temperature,
            "symmetric": self.symmetric,
            "lambda_min": float(lam.min()),
            "lambda_max": float(lam.max()),
        }
