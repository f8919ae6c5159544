"""AnInfoNCE: closed forms, brute-force pair scores, and the isotropic case equal to InfoNCE at τ = 1/λ."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contract.errors import ConfigError
from training.losses.an_info_nce import AnInfoNCELoss, an_info_nce_loss, pair_scores
from training.losses.info_nce import info_nce_loss


def _unit(*shape: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=gen, dtype=torch.float64), dim=-1)


def test_pair_scores_match_the_definition():
    a, b = _unit(3, 5, seed=1), _unit(4, 5, seed=2)
    lam = torch.tensor([0.5, 1.0, 2.0, 7.0, 20.0], dtype=torch.float64)
    brute = torch.tensor(
        [
            [-0.5 * sum(float(lam[c]) * float(a[i, c] - b[j, c]) ** 2 for c in range(5)) for j in range(4)]
            for i in range(3)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(pair_scores(a, b, lam), brute)


def test_identity_batch_with_anisotropic_lambda_has_closed_form():
    # q = d = I₄: the positive scores 0, the pair (i, j) scores -½ (Λ_i + Λ_j)
    lam = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    eye = torch.eye(4, dtype=torch.float64)
    expected = np.mean(
        [math.log(1 + sum(math.exp(-0.5 * (lam[i] + lam[j])) for j in range(4) if j != i)) for i in range(4)]
    )
    assert float(an_info_nce_loss(eye, eye, lam)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("lam_value", [1.0, 20.0])
@pytest.mark.parametrize("symmetric", [False, True])
def test_isotropic_lambda_equals_infonce_at_inverse_temperature(lam_value, symmetric):
    """-½ λ ‖u - v‖² = λ⟨u, v⟩ - λ on the sphere, so Λ = λ·1 is InfoNCE at τ = 1/λ (loss and gradients)."""
    q0, d0, extra = _unit(6, 10, seed=3), _unit(6, 10, seed=4), _unit(3, 10, seed=5)
    lam = torch.full((10,), lam_value, dtype=torch.float64)

    q, d = q0.clone().requires_grad_(True), d0.clone().requires_grad_(True)
    ours = an_info_nce_loss(q, d, lam, extra_docs=extra, symmetric=symmetric)
    ours.backward()
    q_ref, d_ref = q0.clone().requires_grad_(True), d0.clone().requires_grad_(True)
    ref = info_nce_loss(q_ref, d_ref, temperature=1 / lam_value, extra_docs=extra, symmetric=symmetric)
    ref.backward()

    assert float(ours.detach()) == pytest.approx(float(ref.detach()), rel=1e-10)
    torch.testing.assert_close(q.grad, q_ref.grad)
    torch.testing.assert_close(d.grad, d_ref.grad)


def test_wrapper_starts_as_infonce_at_tau_0_05():
    loss_fn = AnInfoNCELoss(8)
    np.testing.assert_allclose(loss_fn.lam, np.full(8, 20.0), rtol=1e-6)
    q, d = _unit(5, 8, seed=6).float(), _unit(5, 8, seed=7).float()
    assert float(loss_fn(q, d).detach()) == pytest.approx(
        float(info_nce_loss(q, d, temperature=0.05)), rel=1e-5
    )


def test_anisotropic_lambda_changes_the_loss_and_w_is_trained():
    q, d = _unit(6, 4, seed=8).float(), _unit(6, 4, seed=9).float()
    loss_fn = AnInfoNCELoss(4, init_temperature=0.5)
    isotropic = float(loss_fn(q, d).detach())
    with torch.no_grad():
        loss_fn.w[0] += 3.0
    assert float(loss_fn(q, d).detach()) != pytest.approx(isotropic, rel=1e-4)

    loss_fn(q, d).backward()
    assert loss_fn.w.grad is not None and torch.isfinite(loss_fn.w.grad).all()
    assert loss_fn.w.grad.abs().sum() > 0


def test_gradients_are_finite_at_large_lambda():
    q = _unit(8, 16, seed=10).float().requires_grad_(True)
    d = _unit(8, 16, seed=11).float().requires_grad_(True)
    lam = torch.linspace(1.0, 200.0, 16)
    loss = an_info_nce_loss(q, d, lam, extra_docs=_unit(4, 16, seed=12).float(), symmetric=True)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad).all() and torch.isfinite(d.grad).all()


def test_extra_docs_and_symmetric_change_what_they_should():
    q, d, extra = _unit(4, 6, seed=13), _unit(4, 6, seed=14), _unit(3, 6, seed=15)
    lam = torch.linspace(2.0, 12.0, 6, dtype=torch.float64)
    plain = float(an_info_nce_loss(q, d, lam))
    assert float(an_info_nce_loss(q, d, lam, extra_docs=extra)) > plain
    labels = torch.arange(4)
    back = F.cross_entropy(pair_scores(d, q, lam), labels)  # doc→query among the 4 queries
    assert float(an_info_nce_loss(q, d, lam, symmetric=True)) == pytest.approx(
        0.5 * (plain + float(back)), rel=1e-12
    )


def test_param_groups_similarity_and_config():
    loss_fn = AnInfoNCELoss(4, init_temperature=0.1)
    (group,) = loss_fn.param_groups(1e-2)
    assert group["lr"] == 1e-2 and group["params"] == [loss_fn.w]
    sim = loss_fn.similarity()
    assert sim.metric == "aninfonce" and sim.lam == pytest.approx([10.0] * 4, rel=1e-6)
    # serving's L2 on √Λ-scaled vectors reproduces the training score
    u, v = _unit(2, 4, seed=16).numpy()
    scaled = np.sqrt(np.array(sim.lam))
    expected = float(
        pair_scores(torch.tensor(u[None]), torch.tensor(v[None]), torch.tensor(sim.lam, dtype=torch.float64))
    )
    assert -0.5 * float(((scaled * u - scaled * v) ** 2).sum()) == pytest.approx(expected, rel=1e-6)
    assert loss_fn.get_config_dict()["loss"] == "aninfonce"


def test_bad_input_gets_a_clear_error():
    eye = torch.eye(4)
    with pytest.raises(ValueError, match="lam must have shape"):
        an_info_nce_loss(eye, eye, torch.ones(3))
    with pytest.raises(ValueError, match="q .* and d"):
        an_info_nce_loss(eye, torch.eye(3), torch.ones(4))
    with pytest.raises(ValueError, match="extra_docs"):
        an_info_nce_loss(eye, eye, torch.ones(4), extra_docs=torch.ones(2, 3))
    with pytest.raises(ConfigError, match="init_temperature"):
        AnInfoNCELoss(4, init_temperature=0.0)
