"""InfoNCE: closed forms, MultipleNegativesRankingLoss as the oracle, brute-force loops for each variant."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.losses.multiple_negatives_ranking import (
    MultipleNegativesRankingLoss,
)

from contract.errors import ConfigError
from training.losses.info_nce import InfoNCELoss, info_nce_loss


def _unit(*shape: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=gen, dtype=torch.float64), dim=-1)


def _grads(fn, *tensors: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    loss = fn(*leaves)
    loss.backward()
    return float(loss.detach()), [leaf.grad for leaf in leaves]


def _brute_rows(q, cand, tau, row_loss) -> float:
    """Mean over rows of row_loss(positive logit, [negative logits], tau), in plain Python floats."""
    total = 0.0
    for i in range(q.shape[0]):
        logits = [float(q[i] @ cand[j]) / tau for j in range(cand.shape[0])]
        total += row_loss(logits[i], logits[:i] + logits[i + 1 :], tau)
    return total / q.shape[0]


# -- closed forms ------------------------------------------------------------------------------------
def test_identity_batch_at_unit_temperature_has_closed_form():
    eye = torch.eye(4)
    assert float(info_nce_loss(eye, eye, temperature=1.0)) == pytest.approx(
        math.log(1 + 3 / math.e), abs=1e-6
    )
    assert math.log(1 + 3 / math.e) == pytest.approx(0.743668, abs=1e-6)


def test_identical_rows_give_log_batch_size():
    rows = F.normalize(torch.ones(4, 8), dim=1)
    assert float(info_nce_loss(rows, rows, temperature=0.05)) == pytest.approx(math.log(4), abs=1e-6)


def test_small_temperature_on_orthogonal_pairs_goes_to_zero():
    eye = torch.eye(4)
    assert float(info_nce_loss(eye, eye, temperature=0.01)) < 1e-20


# -- sentence-transformers MultipleNegativesRankingLoss as the oracle ------------------------------
@pytest.mark.parametrize("tau", [0.05, 0.3])
@pytest.mark.parametrize("n_neg_columns", [0, 1, 2])
def test_equals_mnrl_loss_and_gradients(tau, n_neg_columns):
    batch, dim = 6, 12
    q, d = _unit(batch, dim, seed=1), _unit(batch, dim, seed=2)
    negs = [_unit(batch, dim, seed=10 + c) for c in range(n_neg_columns)]
    mnrl = MultipleNegativesRankingLoss(None, scale=1 / tau)  # embedding-level API needs no model

    ref_loss, ref_grads = _grads(lambda *e: mnrl.compute_loss_from_embeddings(list(e), None), q, d, *negs)

    def ours(q, d, *negs):
        extra = torch.cat(negs) if negs else None  # MNRL's negative columns are shared candidates
        return info_nce_loss(q, d, temperature=tau, extra_docs=extra)

    loss, grads = _grads(ours, q, d, *negs)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref, rtol=1e-10, atol=1e-12)


def test_symmetric_equals_mnrl_both_directions_and_mean_by_hand():
    q, d = _unit(5, 8, seed=3), _unit(5, 8, seed=4)
    tau = 0.1
    mnrl = MultipleNegativesRankingLoss(
        None, scale=1 / tau, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
    )
    ref_loss, ref_grads = _grads(lambda a, b: mnrl.compute_loss_from_embeddings([a, b], None), q, d)
    loss, grads = _grads(lambda a, b: info_nce_loss(a, b, temperature=tau, symmetric=True), q, d)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref)

    labels = torch.arange(5)
    by_hand = 0.5 * (F.cross_entropy(q @ d.T / tau, labels) + F.cross_entropy(d @ q.T / tau, labels))
    assert loss == pytest.approx(float(by_hand), rel=1e-12)
    assert loss != pytest.approx(float(info_nce_loss(q, d, temperature=tau)), rel=1e-3)


def test_equals_mnrl_through_the_real_encoder(base_encoder):
    """Same loss and same parameter gradients as MNRL when both embed with the real MiniLM."""
    model = base_encoder.model
    model.eval()  # no dropout: both passes must see the same network
    queries = ["what lowers blood pressure", "protein folding in cells", "vaccine efficacy in adults"]
    docs = [
        "Salt reduction lowers blood pressure.",
        "Chaperones help proteins fold.",
        "The vaccine was 90% effective.",
    ]
    feats = [model.preprocess(queries), model.preprocess(docs)]
    param = next(p for name, p in model.named_parameters() if "layer.5.output.dense.weight" in name)

    # τ = 0.5 keeps the loss O(1): at τ = 0.05 these easy pairs give ~1e-4 and float32 noise dominates
    mnrl_loss = MultipleNegativesRankingLoss(model, scale=2.0)(feats, None)
    mnrl_loss.backward()
    ref_grad = param.grad.clone()
    model.zero_grad()

    q, d = (model(dict(f))["sentence_embedding"] for f in feats)
    loss = info_nce_loss(q, d, temperature=0.5)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(float(mnrl_loss.detach()), rel=1e-5)
    torch.testing.assert_close(param.grad, ref_grad, rtol=1e-4, atol=1e-7)


# -- variants against brute force ------------------------------------------------------------------
def test_extra_docs_add_candidates():
    q, d, extra = _unit(4, 8, seed=5), _unit(4, 8, seed=6), _unit(3, 8, seed=7)
    tau = 0.2
    with_extra = float(info_nce_loss(q, d, temperature=tau, extra_docs=extra))
    brute = _brute_rows(
        q,
        torch.cat([d, extra]),
        tau,
        lambda p, negs, t: -p + math.log(math.exp(p) + sum(map(math.exp, negs))),
    )
    assert with_extra == pytest.approx(brute, rel=1e-10)
    assert with_extra > float(info_nce_loss(q, d, temperature=tau))  # k grew from B-1 = 3 to B+M-1 = 6


def test_decoupled_drops_the_positive_from_the_denominator():
    q, d, extra = _unit(5, 8, seed=8), _unit(5, 8, seed=9), _unit(2, 8, seed=10)
    tau = 0.1
    loss = float(info_nce_loss(q, d, temperature=tau, extra_docs=extra, decoupled=True))
    brute = _brute_rows(
        q, torch.cat([d, extra]), tau, lambda p, negs, t: -p + math.log(sum(map(math.exp, negs)))
    )
    assert loss == pytest.approx(brute, rel=1e-10)
    assert loss < float(info_nce_loss(q, d, temperature=tau, extra_docs=extra))


def _chuang_row(tau_plus: float):
    def row(p: float, negs: list[float], t: float) -> float:
        n = len(negs)
        g = max(
            (sum(math.exp(s) for s in negs) / n - tau_plus * math.exp(p)) / (1 - tau_plus), math.exp(-1 / t)
        )
        return -math.log(math.exp(p) / (math.exp(p) + n * g))

    return row


@pytest.mark.parametrize("tau_plus", [0.05, 0.1, 0.5])
def test_debiased_matches_chuang_formula(tau_plus):
    q, d, extra = _unit(6, 8, seed=11), _unit(6, 8, seed=12), _unit(3, 8, seed=13)
    tau = 0.5
    loss = float(info_nce_loss(q, d, temperature=tau, extra_docs=extra, debiased_tau_plus=tau_plus))
    assert loss == pytest.approx(_brute_rows(q, torch.cat([d, extra]), tau, _chuang_row(tau_plus)), rel=1e-10)


def test_debiased_with_zero_prior_is_plain_infonce_and_clamps_at_the_floor():
    q, d = _unit(6, 8, seed=14), _unit(6, 8, seed=15)
    tau = 0.5
    plain = float(info_nce_loss(q, d, temperature=tau))
    assert float(info_nce_loss(q, d, temperature=tau, debiased_tau_plus=0.0)) == pytest.approx(plain)
    # q = d = I: every negative logit is 0, the positive 1/τ; with τ⁺ large g hits its floor e^{-1/τ}
    eye = torch.eye(4, dtype=torch.float64)
    floor = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + 3 * math.exp(-1 / tau)))
    assert float(info_nce_loss(eye, eye, temperature=tau, debiased_tau_plus=0.9)) == pytest.approx(floor)


def test_debiased_is_stable_at_small_temperature():
    q = _unit(8, 16, seed=16).float().requires_grad_(True)
    d = _unit(8, 16, seed=17).float()
    loss = info_nce_loss(q, d, temperature=0.01, debiased_tau_plus=0.1)  # e^{1/τ} = e^100 overflows float32
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad).all()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"symmetric": True},
        {"decoupled": True},
        {"debiased_tau_plus": 0.1},
        {"symmetric": True, "decoupled": True},
    ],
)
def test_gradients_are_finite(options):
    q = _unit(8, 16, seed=18).float().requires_grad_(True)
    d = _unit(8, 16, seed=19).float().requires_grad_(True)
    loss = info_nce_loss(q, d, temperature=0.02, extra_docs=_unit(4, 16, seed=20).float(), **options)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(q.grad).all() and torch.isfinite(d.grad).all()
    assert q.grad.abs().sum() > 0


# -- temperature and the wrapper -------------------------------------------------------------------
def test_tensor_temperature_receives_a_gradient():
    q, d = _unit(4, 8, seed=21), _unit(4, 8, seed=22)
    tau = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    info_nce_loss(q, d, temperature=tau).backward()
    assert tau.grad is not None and float(tau.grad) != 0.0


def test_learnable_temperature_is_trained_and_clipped():
    q, d = _unit(4, 8, seed=23).float(), _unit(4, 8, seed=24).float()
    loss_fn = InfoNCELoss(0.1, learn_temperature=True)
    assert float(loss_fn(q, d).detach()) == pytest.approx(
        float(info_nce_loss(q, d, temperature=0.1)), rel=1e-6
    )
    loss_fn(q, d).backward()
    assert loss_fn.log_scale.grad is not None and float(loss_fn.log_scale.grad) != 0.0
    assert loss_fn.param_groups(1e-3) == [{"params": [loss_fn.log_scale], "lr": 1e-3, "weight_decay": 0.0}]
    with torch.no_grad():
        loss_fn.log_scale.fill_(10.0)  # 1/τ = e^10, far beyond CLIP's bound
    loss_fn(q, d)
    assert loss_fn.temperature == pytest.approx(0.01)
    assert loss_fn.similarity().temperature == pytest.approx(0.01)


def test_fixed_temperature_is_not_a_trainable_parameter():
    loss_fn = InfoNCELoss(0.05)
    assert not any(p.requires_grad for p in loss_fn.parameters())
    assert loss_fn.param_groups(1e-3) == []
    assert loss_fn.temperature == pytest.approx(0.05)
    sim = loss_fn.similarity()
    assert sim.metric == "cosine" and sim.temperature == pytest.approx(0.05)
    config = loss_fn.get_config_dict()
    assert config["loss"] == "infonce" and config["temperature"] == pytest.approx(0.05)


def test_wrapper_options_reach_the_loss():
    q, d, extra = _unit(5, 8, seed=25).float(), _unit(5, 8, seed=26).float(), _unit(2, 8, seed=27).float()
    for options in ({"symmetric": True}, {"decoupled": True}, {"debiased_tau_plus": 0.2}):
        wrapped = float(InfoNCELoss(0.1, **options)(q, d, extra).detach())
        assert wrapped == pytest.approx(
            float(info_nce_loss(q, d, temperature=0.1, extra_docs=extra, **options))
        )
        assert wrapped != pytest.approx(
            float(info_nce_loss(q, d, temperature=0.1, extra_docs=extra)), rel=1e-4
        )


# -- bad input -------------------------------------------------------------------------------------
def test_bad_input_gets_a_clear_error():
    q = torch.eye(4)
    with pytest.raises(ValueError, match="same shape"):
        info_nce_loss(q, torch.eye(3), temperature=0.1)
    with pytest.raises(ValueError, match="extra_docs"):
        info_nce_loss(q, q, temperature=0.1, extra_docs=torch.ones(2, 5))
    with pytest.raises(ConfigError, match="temperature"):
        info_nce_loss(q, q, temperature=0.0)
    with pytest.raises(ConfigError, match="not both"):
        InfoNCELoss(0.1, decoupled=True, debiased_tau_plus=0.1)
    with pytest.raises(ConfigError, match="debiased_tau_plus"):
        InfoNCELoss(0.1, debiased_tau_plus=1.0)
    with pytest.raises(ConfigError, match="learnable floor"):
        InfoNCELoss(0.001, learn_temperature=True)
    with pytest.raises(ValueError, match="at least one negative"):
        info_nce_loss(q[:1], q[:1], temperature=0.1, decoupled=True)
    with pytest.raises(ValueError, match="at least one negative"):  # doc→query has only the one query
        info_nce_loss(q[:1], q[:1], temperature=0.1, extra_docs=q[1:], symmetric=True, decoupled=True)
    assert torch.isfinite(info_nce_loss(q[:1], q[:1], temperature=0.1, extra_docs=q[1:], decoupled=True))
