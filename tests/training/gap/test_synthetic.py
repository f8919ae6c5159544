"""The AnInfoNCE controlled experiment at test scale: Λ̂ and the latents must be recovered."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contract.errors import ConfigError
from training.experiments.aninfonce_synthetic import (
    SyntheticSetup,
    linear_r2,
    match_features,
    run_experiment,
    sample_positives,
    sample_sphere,
)


@pytest.fixture()
def one_thread():
    # tiny matrices: one thread is as fast, and the seeded run is then reproducible across machines
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_aninfonce_recovers_lambda_and_latents(one_thread):
    result = run_experiment(SyntheticSetup(n_latent=6, steps=2500, batch=256, seed=0))
    assert result["lam_spearman"] >= 0.9, result
    assert result["linear_r2"] >= 0.9, result
    # Λ̂ is on the scale of the truth (5…25), not stuck at its isotropic start Λ = 2
    assert 2.5 < min(result["lam_learned_sorted"]) < max(result["lam_learned_sorted"]) < 40


def test_positive_sampler_follows_the_anisotropic_kernel():
    """Displacements z⁺ - z shrink along the high-Λ axes: the per-axis variance ratio follows 1/Λ."""
    gen = torch.Generator().manual_seed(0)
    lam = torch.tensor([4.0, 16.0, 64.0])
    z = sample_sphere(20_000, 3, gen)
    z_pos = sample_positives(z, lam, gen)
    np.testing.assert_allclose(z_pos.norm(dim=1).numpy(), 1.0, atol=1e-5)
    var = ((z_pos - z) ** 2).mean(dim=0).numpy()
    assert var[0] > 2 * var[1] > 4 * var[2]  # each 4x step in Λ shrinks the variance by > 2x


def test_scores_on_known_features():
    rng = np.random.default_rng(0)
    latents = rng.normal(size=(2000, 3))
    rotated = latents @ np.linalg.qr(rng.normal(size=(3, 3)))[0]  # linear: R² = 1, but axes mixed
    assert linear_r2(rotated, latents, n_fit=1000) == pytest.approx(1.0)
    permuted = latents[:, [2, 0, 1]] * np.array([1.0, -2.0, 0.5])  # signed, scaled permutation
    matched, mcc = match_features(permuted, latents)
    assert matched.tolist() == [1, 2, 0] and mcc == pytest.approx(1.0)
    assert linear_r2(rng.normal(size=(2000, 3)), latents, n_fit=1000) < 0.05


def test_bad_options_are_refused():
    with pytest.raises(ConfigError, match="lam_true"):
        run_experiment(SyntheticSetup(n_latent=3, lam_true=np.array([1.0, 2.0]), steps=1))
    with pytest.raises(ConfigError, match="loss"):
        run_experiment(SyntheticSetup(n_latent=3, steps=1, loss="triplet"))  # type: ignore[arg-type]
