"""InfoNCE with in-batch (and extra) negatives, plus its symmetric, decoupled and debiased variants.

Per anchor i with cosine similarities s_ij between q_i and the candidates (positive at j = i):

    l_i = -log( e^{s_ii/τ} / Σ_j e^{s_ij/τ} )                 (van den Oord et al. 2018, arXiv 1807.03748)

which is sentence-transformers' MultipleNegativesRankingLoss with scale = 1/τ (Henderson et al. 2017,
arXiv 1705.00652). Candidates are the B positives of the batch plus `extra_docs` (M random corpus documents
and/or mined hard negatives) shared by every row, so each row has N = B + M - 1 negatives.

Variants:
- symmetric: mean of the query→doc and doc→query cross-entropies (CLIP, Radford et al. 2021,
  arXiv 2103.00020); doc→query uses only the B queries as candidates.
- decoupled (DCL, Yeh et al. 2022, arXiv 2110.06848): the positive leaves the denominator,
  l_i = -s_ii/τ + log Σ_{j≠i} e^{s_ij/τ}.
- debiased (Chuang et al. 2020, arXiv 2007.00224) with class prior τ⁺: the negative sum becomes N·g,
  g = max( (mean_{j≠i} e^{s_ij/τ} - τ⁺ e^{s_ii/τ}) / (1 - τ⁺), e^{-1/τ} ), l_i = -log(e^{s_ii/τ} / (e^{s_ii/τ} + N g)).
  τ⁺ = 0 gives back plain InfoNCE.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contract.encoding.similarity import DEFAULT_TEMPERATURE, Similarity
from contract.errors import ConfigError

logger = logging.getLogger(__name__)

MAX_LOGIT_SCALE = 100.0  # CLIP clips the learned 1/τ at 100 so logits cannot blow up


def info_nce_loss(
    q: Tensor,
    d: Tensor,
    *,
    temperature: float | Tensor,
    extra_docs: Tensor | None = None,
    symmetric: bool = False,
    decoupled: bool = False,
    debiased_tau_plus: float = 0.0,
) -> Tensor:
    """Mean InfoNCE loss (nats) of anchors `q` (B, D) against positives `d` (B, D) and `extra_docs` (M, D).

    Rows are re-normalised (idempotent on normalised input) so the logits are exactly cosine / τ, as with
    MNRL's `cos_sim`, and gradients carry no radial component. `temperature` may be a 0-dim tensor
    (learned τ); gradients flow into it.
    """
    _check_inputs(q, d, extra_docs)
    _check_options(temperature, decoupled, debiased_tau_plus)
    q = F.normalize(q, dim=-1)  # (B, D)
    d = F.normalize(d, dim=-1)  # (B, D)
    candidates = d if extra_docs is None else torch.cat([d, F.normalize(extra_docs, dim=-1)])  # (B + M, D)
    if (decoupled or debiased_tau_plus > 0) and min(candidates.shape[0], q.shape[0] if symmetric else 2) < 2:
        # without a negative the decoupled denominator is empty (log 0 = -inf)
        raise ValueError("decoupled/debiased InfoNCE needs at least one negative per row (batch of 1)")
    loss = _directional_loss(q @ candidates.T / temperature, temperature, decoupled, debiased_tau_plus)
    if symmetric:
        # doc→query: each positive picks its query among the B queries only
        back = _directional_loss(d @ q.T / temperature, temperature, decoupled, debiased_tau_plus)  # (B,)
        return 0.5 * (loss.mean() + back.mean())
    return loss.mean()


def _directional_loss(
    logits: Tensor, temperature: float | Tensor, decoupled: bool, tau_plus: float
) -> Tensor:
    """Per-row loss (B,) for logits (B, K) whose positive for row i is column i."""
    batch = logits.shape[0]
    rows = torch.arange(batch, device=logits.device)
    positive = logits[rows, rows]  # (B,)
    if not decoupled and tau_plus == 0:
        return F.cross_entropy(logits, rows, reduction="none")
    is_positive = torch.zeros_like(logits, dtype=torch.bool)
    is_positive[rows, rows] = True
    negatives = logits.masked_fill(is_positive, -math.inf)  # (B, K), positive column removed
    if decoupled:
        return torch.logsumexp(negatives, dim=1) - positive
    # Debiased: everything is shifted by the row maximum so e^{s/τ} cannot overflow at small τ.
    n_neg = logits.shape[1] - 1
    shift = logits.detach().max(dim=1, keepdim=True).values  # (B, 1)
    pos_exp = torch.exp(positive - shift[:, 0])  # (B,)
    neg_sum = torch.exp(negatives - shift).sum(dim=1)  # (B,)
    inv_t = 1.0 / temperature
    floor = n_neg * torch.exp(-inv_t - shift[:, 0])  # (B,)  N · e^{-1/τ}
    n_g = torch.maximum((neg_sum - n_neg * tau_plus * pos_exp) / (1.0 - tau_plus), floor)  # (B,)
    return torch.log(pos_exp + n_g) - (positive - shift[:, 0])  # log(e^{s+} + N g) - s+, shifted


def _check_inputs(q: Tensor, d: Tensor, extra_docs: Tensor | None) -> None:
    if q.ndim != 2 or d.ndim != 2:
        raise ValueError(f"q and d must be 2-D (batch, dim); got q {tuple(q.shape)}, d {tuple(d.shape)}")
    if q.shape != d.shape:
        raise ValueError(
            f"q {tuple(q.shape)} and d {tuple(d.shape)} must have the same shape (row i pairs q_i, d_i)"
        )
    if extra_docs is not None and (extra_docs.ndim != 2 or extra_docs.shape[1] != q.shape[1]):
        raise ValueError(f"extra_docs must be (M, {q.shape[1]}); got {tuple(extra_docs.shape)}")


def _check_options(temperature: float | Tensor, decoupled: bool, tau_plus: float) -> None:
    if not isinstance(temperature, Tensor) and not temperature > 0:
        raise ConfigError(f"temperature must be > 0, got {temperature}")
    if not 0.0 <= tau_plus < 1.0:
        raise ConfigError(f"debiased_tau_plus must be in [0, 1), got {tau_plus}")
    if decoupled and tau_plus > 0:
        raise ConfigError("choose decoupled or debiased (debiased_tau_plus > 0), not both")


class InfoNCELoss(nn.Module):
    """InfoNCE options plus the temperature, fixed or learned.

    A learned τ follows CLIP: the parameter is log(1/τ), and 1/τ is clipped at 100 (τ >= 0.01). The clip
    is applied to the parameter itself before each use, so it never sticks above the bound with a zero
    gradient.
    """

    def __init__(
        self,
        temperature: float = DEFAULT_TEMPERATURE,
        *,
        learn_temperature: bool = False,
        symmetric: bool = False,
        decoupled: bool = False,
        debiased_tau_plus: float = 0.0,
    ) -> None:
        super().__init__()
        _check_options(temperature, decoupled, debiased_tau_plus)
        if learn_temperature and 1.0 / temperature > MAX_LOGIT_SCALE:
            raise ConfigError(f"temperature {temperature} is below the learnable floor {1 / MAX_LOGIT_SCALE}")
        self.learn_temperature = learn_temperature
        self.symmetric = symmetric
        self.decoupled = decoupled
        self.debiased_tau_plus = debiased_tau_plus
        self.log_scale = nn.Parameter(
            torch.tensor(math.log(1.0 / temperature)), requires_grad=learn_temperature
        )  # () log(1/τ)

    def _tau(self) -> Tensor:
        if self.learn_temperature:
            with torch.no_grad():
                self.log_scale.clamp_(max=math.log(MAX_LOGIT_SCALE))
        return torch.exp(-self.log_scale)  # ()

    def forward(self, q: Tensor, d: Tensor, extra_docs: Tensor | None = None) -> Tensor:
        tau: float | Tensor = self._tau() if self.learn_temperature else self.temperature
        return info_nce_loss(
            q,
            d,
            temperature=tau,
            extra_docs=extra_docs,
            symmetric=self.symmetric,
            decoupled=self.decoupled,
            debiased_tau_plus=self.debiased_tau_plus,
        )

    def param_groups(self, temperature_lr: float) -> list[dict[str, Any]]:
        """Optimizer parameter group for the learned log(1/τ) (none when τ is fixed)."""
        if not self.learn_temperature:
            return []
        return [{"params": [self.log_scale], "lr": temperature_lr, "weight_decay": 0.0}]

    @property
    def temperature(self) -> float:
        return float(torch.exp(-self.log_scale.detach().clamp(max=math.log(MAX_LOGIT_SCALE))))

    def similarity(self) -> Similarity:
        """What serving must use: cosine, with the final τ recorded for the gap report."""
        return Similarity(metric="cosine", temperature=self.temperature, learned=self.learn_temperature)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "loss": "infonce",
            "temperature": self.temperature,
            "learn_temperature": self.learn_temperature,
            "symmetric": self.symmetric,
            "decoupled": self.decoupled,
            "debiased_tau_plus": self.debiased_tau_plus,
        }
