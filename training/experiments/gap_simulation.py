"""A synthetic contrastive world where the truth is known, to validate the gap estimators.

Latents z are uniform on the sphere S^{d-1}; the positive of an anchor a is drawn from a von Mises–Fisher
kernel M(a, ·) = vMF(a, κ) (the "vMF-like positive kernel" of Zimmermann et al. 2021 and Rusak et al.
2024/25); negatives are fresh uniform latents. The encoder is the ideal one, φ(z) = z, so similarities are
exact inner products and every population quantity has a closed form through Bessel functions:

    M(t)  = E_{z~unif} e^{t⟨a,z⟩} = Γ(d/2) (2/t)^ν I_ν(t),  ν = d/2 − 1      (so log μ(a) = log M(1/τ))
    E⟨a, z⁺⟩ = A_d(κ) = I_{d/2}(κ) / I_ν(κ)
    CE∞ = −A_d(κ)/τ + log M(1/τ)                                              (P1 eq 7)
    d1  = E_vMF e^{s⁺/τ} / M(1/τ),   c1 = ½ (M(2/τ)/M(1/τ)² − 1)              (second-order expansion of Whiteley 2026, arXiv 2607.09405)

The finite-k risk R(k) has no closed form; `true_risk` estimates it from a huge sample. Because the
negatives are i.i.d. and independent of the anchor, a similarity ⟨a, z⁻⟩ has the exact law
2·Beta((d−1)/2, (d−1)/2) − 1 and ⟨a, z⁺⟩ the Wood (1994) vMF marginal, so similarity matrices can be
drawn directly without materialising vectors (`sample_sims`); `sample_vectors` draws the vectors for
tests that want the real matrix-product path.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln, ive

from training.gap.estimators import infonce_risk

logger = logging.getLogger(__name__)


def log_mgf_uniform(t: float, d: int) -> float:
    """log E e^{t⟨a,z⟩} for z uniform on S^{d-1} (t > 0)."""
    nu = d / 2.0 - 1.0
    return float(gammaln(d / 2.0) + nu * math.log(2.0 / t) + math.log(ive(nu, t)) + t)


def log_mgf_vmf(t: float, kappa: float, d: int) -> float:
    """log E e^{t⟨a,z⟩} for z ~ vMF(a, κ): the ratio of vMF normalisers C_d(κ)/C_d(κ+t)."""
    nu = d / 2.0 - 1.0
    s = kappa + t
    log_i = math.log(ive(nu, s)) + s - math.log(ive(nu, kappa)) - kappa
    return float(nu * math.log(kappa / s) + log_i)


def vmf_mean_cosine(kappa: float, d: int) -> float:
    """A_d(κ) = E⟨a, z⁺⟩ under vMF(a, κ)."""
    return float(ive(d / 2.0, kappa) / ive(d / 2.0 - 1.0, kappa))


def sample_vmf_cosine(kappa: float, d: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """⟨a, z⁺⟩ for z⁺ ~ vMF(a, κ): Wood's (1994) rejection sampler, vectorised. Shape (n,)."""
    b = (d - 1.0) / (2.0 * kappa + math.sqrt(4.0 * kappa**2 + (d - 1.0) ** 2))
    x0 = (1.0 - b) / (1.0 + b)
    c = kappa * x0 + (d - 1.0) * math.log(1.0 - x0**2)
    out = np.empty(n)
    todo = np.arange(n)
    while todo.size:
        z = rng.beta((d - 1.0) / 2.0, (d - 1.0) / 2.0, size=todo.size)
        w = (1.0 - (1.0 + b) * z) / (1.0 - (1.0 - b) * z)
        u = rng.random(todo.size)
        ok = kappa * w + (d - 1.0) * np.log(1.0 - x0 * w) - c >= np.log(u)
        out[todo[ok]] = w[ok]
        todo = todo[~ok]
    return out


def sample_uniform_cosine(d: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """⟨a, z⟩ for z uniform on S^{d-1}: 2·Beta((d−1)/2, (d−1)/2) − 1."""
    return 2.0 * rng.beta((d - 1.0) / 2.0, (d - 1.0) / 2.0, size=shape) - 1.0


@dataclass(frozen=True)
class SphereWorld:
    """Uniform latents on S^{d-1}, positives ~ vMF(a, κ), ideal encoder, temperature τ."""

    dim: int = 8
    kappa: float = 10.0
    tau: float = 0.5

    # -- exact population quantities ------------------------------------------------------------------
    def log_mu(self) -> float:
        return log_mgf_uniform(1.0 / self.tau, self.dim)

    def ce_inf(self) -> float:
        return -vmf_mean_cosine(self.kappa, self.dim) / self.tau + self.log_mu()

    def d1(self) -> float:
        return math.exp(log_mgf_vmf(1.0 / self.tau, self.kappa, self.dim) - self.log_mu())

    def c1(self) -> float:
        return 0.5 * math.expm1(log_mgf_uniform(2.0 / self.tau, self.dim) - 2.0 * self.log_mu())

    def first_order_b(self) -> float:
        return self.d1() - self.c1()

    # -- samples --------------------------------------------------------------------------------------
    def sample_sims(self, n: int, n_neg: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Positive similarities (n,) and i.i.d. negative similarities (n, n_neg), each row its own pool."""
        pos = sample_vmf_cosine(self.kappa, self.dim, n, rng)
        return pos, sample_uniform_cosine(self.dim, (n, n_neg), rng)

    def sample_vectors(
        self, n: int, n_pool: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Anchors (n, d), their positives (n, d) and a shared pool of uniform latents (n_pool, d)."""
        anchors = _uniform_sphere(n, self.dim, rng)
        w = sample_vmf_cosine(self.kappa, self.dim, n, rng)  # (n,)
        v = rng.standard_normal((n, self.dim))
        v -= (v * anchors).sum(1, keepdims=True) * anchors  # tangent direction at each anchor
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        positives = w[:, None] * anchors + np.sqrt(1.0 - w**2)[:, None] * v  # (n, d)
        return anchors, positives, _uniform_sphere(n_pool, self.dim, rng)

    def risk_samples(self, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
        """Per-anchor P1 risk (n,) with k fresh negatives each."""
        pos, neg = self.sample_sims(n, k, rng)
        return infonce_risk(pos, neg, self.tau)


def true_risk(
    world: SphereWorld, k: int, rng: np.random.Generator, n: int = 1_000_000, chunk: int = 200_000
) -> tuple[float, float]:
    """R(k) from a huge independent sample: (mean, standard error)."""
    total, total_sq, done = 0.0, 0.0, 0
    step = max(1, min(chunk, 20_000_000 // max(k, 1)))
    while done < n:
        m = min(step, n - done)
        losses = world.risk_samples(m, k, rng)
        total += losses.sum()
        total_sq += (losses**2).sum()
        done += m
    mean = total / n
    return mean, math.sqrt(max(total_sq / n - mean**2, 0.0) / n)


def _uniform_sphere(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def log_vmf_mgf_vec(t: np.ndarray, mean: np.ndarray, kappa: float) -> np.ndarray:
    """log E e^{⟨t, z⟩} for z ~ vMF(mean, κ), per row of t (n, d): log C_d(κ) − log C_d(‖κ·mean + t‖)."""
    d = mean.shape[-1]
    nu = d / 2.0 - 1.0
    s = np.linalg.norm(kappa * mean + t, axis=-1)  # (n,)
    return nu * np.log(kappa / s) + np.log(ive(nu, s)) + s - math.log(ive(nu, kappa)) - kappa


def sample_vmf(means: np.ndarray, kappa: float, rng: np.random.Generator) -> np.ndarray:
    """One draw from vMF(means[i], κ) per row of the unit vectors `means` (n, d) -> (n, d)."""
    n, d = means.shape
    w = sample_vmf_cosine(kappa, d, n, rng)  # (n,) cosine to the mean
    v = rng.standard_normal((n, d))
    v -= (v * means).sum(1, keepdims=True) * means  # tangent direction at each mean
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return w[:, None] * means + np.sqrt(1.0 - w**2)[:, None] * v


@dataclass(frozen=True)
class MixtureWorld:
    """A clustered corpus: latents (anchors and pool alike) from an equal-weight mixture of `n_clusters`
    vMF(m_c, κ_c) on S^{d-1} (centres uniform, drawn with `centre_seed`), positives ~ vMF(a, κ) around the
    anchor, ideal encoder, temperature τ.

    Per anchor everything is closed form: μ(a) = Σ_c w_c E_{vMF(m_c, κ_c)} e^{⟨a,z⟩/τ} (ratio of vMF
    normalisers), and E⟨a, z⁺⟩ = A_d(κ) whatever the anchor; the population CE∞ = −A_d(κ)/τ + E_a log μ(a)
    and c1 = ½ E_a[μ₂(a)/μ(a)² − 1] (μ₂ with 2/τ) average the exact per-anchor values over many anchors
    (`population`). Unlike the uniform sphere, μ(a) varies with a, and a document in a dense cluster weighs
    on many anchors' μ at once: the finite pool's own variability does not average out over anchors.
    """

    dim: int = 16
    kappa: float = 20.0
    tau: float = 0.2
    n_clusters: int = 6
    cluster_kappa: float = 10.0
    centre_seed: int = 12345

    def centres(self) -> np.ndarray:
        return _uniform_sphere(self.n_clusters, self.dim, np.random.default_rng(self.centre_seed))

    def sample_latents(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n latents from the mixture (n, d)."""
        c = self.centres()[rng.integers(0, self.n_clusters, n)]  # (n, d) each latent's cluster centre
        return sample_vmf(c, self.cluster_kappa, rng)

    def log_mu_of(self, anchors: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """Exact log E_{z~mixture} e^{scale·⟨a,z⟩/τ} per anchor (n,)."""
        terms = np.stack(
            [log_vmf_mgf_vec(anchors * (scale / self.tau), m, self.cluster_kappa) for m in self.centres()],
            axis=1,
        )  # (n, C)
        top = terms.max(axis=1)
        return top + np.log(np.exp(terms - top[:, None]).mean(axis=1))

    def population(self, rng: np.random.Generator, n: int = 400_000) -> dict[str, float]:
        """CE∞, c1 and their Monte Carlo standard errors from n anchors' exact per-anchor values."""
        a = self.sample_latents(n, rng)
        log_mu = self.log_mu_of(a)
        c1 = 0.5 * np.expm1(self.log_mu_of(a, 2.0) - 2.0 * log_mu)
        mean_pos = vmf_mean_cosine(self.kappa, self.dim)
        return {
            "ce_inf": float(-mean_pos / self.tau + log_mu.mean()),
            "ce_inf_se": float(log_mu.std() / math.sqrt(n)),
            "c1": float(c1.mean()),
            "c1_se": float(c1.std() / math.sqrt(n)),
        }

    def sample_vectors(
        self, n: int, n_pool: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Anchors (n, d), their positives (n, d) and a pool (n_pool, d) from the mixture."""
        anchors = self.sample_latents(n, rng)
        return anchors, sample_vmf(anchors, self.kappa, rng), self.sample_latents(n_pool, rng)
