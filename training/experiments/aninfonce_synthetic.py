"""AnInfoNCE controlled experiment at CPU scale (Rusak et al. 2024/25, arXiv 2407.00143, §2).

Ground truth: latents z uniform on S^{n-1}; a positive z⁺ from the anisotropic kernel
p(z⁺|z) ∝ exp(-½ (z⁺ - z)ᵀ Λ (z⁺ - z)), drawn like the official `rejected_projected_normal` sampler
(z + N(0, diag(1/Λ)), kept if |‖·‖ - 1| < threshold, projected onto the sphere); observations x = g(z)
through a fixed invertible leaky-ReLU MLP. An MLP encoder f with L2-normalised output is trained on
(g(z), g(z⁺)) pairs with in-batch negatives, by AnInfoNCE (learned diagonal Λ̂) or plain InfoNCE.

Scores, on held-out samples:
- linear R²: least squares from f(x) to z (fitted on one held-out set, scored on another),
  mean over latent dimensions;
- Λ̂ recovery: each true latent is matched to one feature by the Hungarian assignment on |corr(f_c, z_k)|
  (their mean is the "permutation disentanglement", MCC); Spearman rank correlation between Λ_true and
  the matched Λ̂.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from scipy.stats import spearmanr
from torch import Tensor, nn
from tqdm import tqdm

from contract.errors import ConfigError
from training.losses.an_info_nce import AnInfoNCELoss
from training.losses.info_nce import InfoNCELoss

logger = logging.getLogger(__name__)

LossName = Literal["aninfonce", "infonce"]


def sample_sphere(n: int, dim: int, gen: torch.Generator) -> Tensor:
    """n points uniform on S^{dim-1}: normalised standard normals."""
    return F.normalize(torch.randn(n, dim, generator=gen), dim=1)  # (n, dim)


def sample_positives(z: Tensor, lam: Tensor, gen: torch.Generator, *, threshold: float = 0.1) -> Tensor:
    """One positive per row of z (n, dim): z + N(0, diag(1/Λ)), rejected unless |‖·‖ - 1| < threshold,
    then projected onto the sphere (the official rejected projected normal sampler)."""
    std = lam.rsqrt()  # (dim,)
    out = torch.empty_like(z)  # (n, dim)
    pending = torch.arange(z.shape[0])
    for _ in range(10_000):
        if pending.numel() == 0:
            return F.normalize(out, dim=1)
        # oversample: a few tries per pending row in one call keeps the loop short
        tries = 8
        cand = (
            z[pending].repeat(tries, 1)
            + torch.randn(tries * pending.numel(), z.shape[1], generator=gen) * std
        )
        ok = ((cand.norm(dim=1) - 1.0).abs() < threshold).view(tries, -1)  # (tries, pending)
        first = ok.float().argmax(dim=0)  # (pending,) first accepted try, if any
        accepted = ok.any(dim=0)  # (pending,)
        picked = cand.view(tries, -1, z.shape[1])[first, torch.arange(pending.numel())]  # (pending, dim)
        out[pending[accepted]] = picked[accepted]
        pending = pending[~accepted]
    raise RuntimeError("rejection sampler did not converge; threshold too small for this Λ")


def make_mixing(dim: int, gen: torch.Generator, *, n_layers: int = 3, slope: float = 0.2) -> nn.Sequential:
    """A fixed invertible MLP g: square layers with singular values in [0.5, 1] (condition number <= 2)
    and leaky ReLUs (invertible for slope > 0)."""
    layers: list[nn.Module] = []
    for i in range(n_layers):
        u, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen))
        v, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen))
        s = 0.5 + 0.5 * torch.rand(dim, generator=gen)
        lin = nn.Linear(dim, dim)
        with torch.no_grad():
            lin.weight.copy_(u @ torch.diag(s) @ v.T)
            lin.bias.copy_(0.1 * torch.randn(dim, generator=gen))
        layers.append(lin)
        if i < n_layers - 1:
            layers.append(nn.LeakyReLU(slope))
    mixing = nn.Sequential(*layers)
    mixing.requires_grad_(False)
    return mixing


class MLPEncoder(nn.Module):
    """f: x -> unit vector in R^dim."""

    def __init__(self, dim: int, hidden: int, depth: int) -> None:
        super().__init__()
        widths = [dim] + [hidden] * depth
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            layers += [nn.Linear(a, b), nn.LeakyReLU(0.01)]
        layers.append(nn.Linear(widths[-1], dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(self.net(x), dim=1)  # (n, dim)


def linear_r2(features: np.ndarray, latents: np.ndarray, *, n_fit: int) -> float:
    """Mean R² over latent dimensions of a least-squares map features → latents (with intercept),
    fitted on the first n_fit rows and scored on the rest."""
    design = np.hstack([features, np.ones((len(features), 1))])  # (n, d + 1)
    coef, *_ = np.linalg.lstsq(design[:n_fit], latents[:n_fit], rcond=None)  # (d + 1, n_latent)
    pred = design[n_fit:] @ coef  # (n - n_fit, n_latent)
    truth = latents[n_fit:]
    ss_res = ((truth - pred) ** 2).sum(axis=0)
    ss_tot = ((truth - truth.mean(axis=0)) ** 2).sum(axis=0)
    return float(np.mean(1.0 - ss_res / ss_tot))


def match_features(features: np.ndarray, latents: np.ndarray) -> tuple[np.ndarray, float]:
    """For each latent k the feature index matched to it (Hungarian on |corr|), and the mean |corr| (MCC)."""
    k = latents.shape[1]
    corr = np.corrcoef(latents.T, features.T)[:k, k:]  # (n_latent, n_features)
    rows, cols = linear_sum_assignment(-np.abs(corr))
    return cols[np.argsort(rows)], float(np.abs(corr[rows, cols]).mean())


@dataclass(frozen=True)
class SyntheticSetup:
    """One synthetic run: the latent process, the encoder, the loss and its optimisation.

    Why these defaults (CPU scale, a few thousand steps instead of the official long GPU runs): Λ starts
    low and isotropic (Λ = 1/0.5 = 2, the official code starts near softplus(0) ≈ 0.7) so the encoder
    first learns a near-isometric map and Λ̂ then separates; started at Λ = 20 the encoder warps itself
    to fit an isotropic kernel and Λ̂ stayed near-isotropic (rank correlation 0.1-0.6 in our runs).
    Learning rates are 30x/50x the official 1e-4/1e-3, with cosine decay so short runs end converged.
    """

    n_latent: int = 10
    lam_true: np.ndarray | None = None  # default linspace(5, 25, n_latent)
    steps: int = 3000
    batch: int = 256
    seed: int = 0
    loss: LossName = "aninfonce"
    hidden: int = 128
    depth: int = 3
    lr: float = 3e-3
    lambda_lr: float = 5e-2  # Λ̂'s, or τ's for infonce when learn_temperature
    init_temperature: float = 0.5
    learn_temperature: bool = True
    n_eval: int = 10_000
    threshold: float = 0.1


@dataclass
class _Run:
    """What one run trains: the encoder, the fixed mixing it sees the latents through, the loss module and
    the optimiser over both."""

    encoder: nn.Module
    mixing: nn.Sequential
    criterion: AnInfoNCELoss | InfoNCELoss
    opt: torch.optim.Optimizer


def run_experiment(setup: SyntheticSetup | None = None, *, progress: bool = False) -> dict[str, Any]:
    """Train f (and Λ̂ or τ) on the synthetic process; return the scores described in the module docstring.
    For `loss="infonce"`, τ starts at `init_temperature` and is learned when `learn_temperature`."""
    c = setup or SyntheticSetup()
    lam_np = _checked_lam(c.n_latent, c.lam_true, c.loss)
    torch.manual_seed(c.seed)
    gen = torch.Generator().manual_seed(c.seed)
    lam = torch.tensor(lam_np, dtype=torch.float32)  # (n,)
    mixing = make_mixing(c.n_latent, gen)
    encoder = MLPEncoder(c.n_latent, c.hidden, c.depth)
    criterion, opt = _criterion_and_optimizer(c, encoder)
    start = time.perf_counter()
    losses = _train(_Run(encoder, mixing, criterion, opt), c, lam, gen, progress)
    elapsed = time.perf_counter() - start
    r2, mcc, matched = _score(encoder, mixing, c.n_latent, c.n_eval, gen)
    result: dict[str, Any] = {
        "loss": c.loss,
        "n_latent": c.n_latent,
        "steps": c.steps,
        "batch": c.batch,
        "seed": c.seed,
        "lam_true": lam_np.tolist(),
        "linear_r2": r2,
        "mcc": mcc,
        "final_loss": float(np.mean(losses[-50:])),
        "elapsed_s": elapsed,
    }
    result |= _learned_scale(criterion, lam_np, matched)
    _log_summary(result)
    return result


def _checked_lam(n_latent: int, lam_true: np.ndarray | None, loss: str) -> np.ndarray:
    """The true Λ (default linspace(5, 25, n_latent)), after checking it and the loss name."""
    lam_np = np.linspace(5.0, 25.0, n_latent) if lam_true is None else np.asarray(lam_true, dtype=np.float64)
    if lam_np.shape != (n_latent,) or not np.all(lam_np > 0):
        raise ConfigError(f"lam_true must be {n_latent} positive values, got {lam_np}")
    if loss not in ("aninfonce", "infonce"):
        raise ConfigError(f"loss must be 'aninfonce' or 'infonce', got {loss!r}")
    return lam_np


def _log_summary(result: dict[str, Any]) -> None:
    logger.info(
        "synthetic %s: R²=%.3f MCC=%.3f%s in %.1fs",
        result["loss"],
        result["linear_r2"],
        result["mcc"],
        f" Λ̂ spearman={result['lam_spearman']:.3f}" if "lam_spearman" in result else "",
        result["elapsed_s"],
    )


def _criterion_and_optimizer(
    c: SyntheticSetup, encoder: nn.Module
) -> tuple[AnInfoNCELoss | InfoNCELoss, torch.optim.Adam]:
    """The loss module (Λ̂ or τ learned at `lambda_lr`) and one Adam over the encoder and the loss."""
    loss, n_latent, lr, lambda_lr = c.loss, c.n_latent, c.lr, c.lambda_lr
    init_temperature, learn_temperature = c.init_temperature, c.learn_temperature
    criterion: AnInfoNCELoss | InfoNCELoss
    if loss == "aninfonce":
        criterion = AnInfoNCELoss(n_latent, init_temperature=init_temperature, symmetric=True)
        groups = [{"params": encoder.parameters(), "lr": lr}, *criterion.param_groups(lambda_lr)]
    else:
        criterion = InfoNCELoss(init_temperature, learn_temperature=learn_temperature, symmetric=True)
        groups = [{"params": encoder.parameters(), "lr": lr}]
        if learn_temperature:
            groups.append({"params": [criterion.log_scale], "lr": lambda_lr})
    return criterion, torch.optim.Adam(groups)


def _train(run: _Run, c: SyntheticSetup, lam: Tensor, gen: torch.Generator, progress: bool) -> list[float]:
    """`steps` Adam steps on fresh (z, z⁺) batches seen through the mixing; returns the loss per step."""
    # cosine decay: a few thousand CPU steps must end converged, not oscillating at a high rate
    encoder, mixing, criterion, opt = run.encoder, run.mixing, run.criterion, run.opt
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=c.steps)
    n_latent = lam.shape[0]
    losses: list[float] = []
    for _ in tqdm(range(c.steps), desc=f"synthetic {c.loss}", disable=not progress, mininterval=2.0):
        z = sample_sphere(c.batch, n_latent, gen)  # (B, n)
        z_pos = sample_positives(z, lam, gen, threshold=c.threshold)  # (B, n)
        with torch.no_grad():
            x, x_pos = mixing(z), mixing(z_pos)  # (B, n) each
        value = criterion(encoder(x), encoder(x_pos))
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        sched.step()
        losses.append(float(value.detach()))
    return losses


def _score(
    encoder: nn.Module, mixing: nn.Sequential, n_latent: int, n_eval: int, gen: torch.Generator
) -> tuple[float, float, np.ndarray]:
    """Linear R² (fit on n_eval fresh samples, scored on n_eval more), MCC and the matched features."""
    with torch.no_grad():
        z_eval = sample_sphere(2 * n_eval, n_latent, gen)  # (2 n_eval, n)
        h_eval = encoder(mixing(z_eval)).double().numpy()  # (2 n_eval, n)
    z_np = z_eval.double().numpy()
    r2 = linear_r2(h_eval, z_np, n_fit=n_eval)
    matched, mcc = match_features(h_eval[:n_eval], z_np[:n_eval])
    return r2, mcc, matched


def _learned_scale(
    criterion: AnInfoNCELoss | InfoNCELoss, lam_np: np.ndarray, matched: np.ndarray
) -> dict[str, Any]:
    """AnInfoNCE: Λ̂ matched to the true latents and its rank correlation with Λ; InfoNCE: τ and 1/τ."""
    if isinstance(criterion, AnInfoNCELoss):
        lam_hat = criterion.lam
        lam_matched = lam_hat[matched]  # Λ̂ of the feature matched to each true latent
        return {
            "lam_learned_matched": lam_matched.tolist(),
            "lam_learned_sorted": np.sort(lam_hat).tolist(),
            "lam_spearman": float(spearmanr(lam_np, lam_matched).statistic),
        }
    return {
        "temperature": criterion.temperature,
        "lam_equivalent": 1.0 / criterion.temperature,  # isotropic Λ = 1/τ
    }
