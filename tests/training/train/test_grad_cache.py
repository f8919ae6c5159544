"""GradCache gives the same loss and the same parameter gradients as the plain (uncached) loss."""

from __future__ import annotations

import pytest
import torch

from training.losses.an_info_nce import AnInfoNCELoss
from training.losses.info_nce import InfoNCELoss
from training.train.grad_cache import cached_loss_backward
from training.train.step import embed

QUERIES = [
    "Aspirin lowers the risk of colorectal cancer.",
    "Vitamin D deficiency is linked to depression.",
    "Statins increase the risk of diabetes.",
    "Exercise improves memory in older adults.",
    "Smoking causes lung cancer.",
]
DOCS = [
    "Long-term aspirin use and colorectal cancer incidence in a cohort of 80,000 women.",
    "Serum vitamin D levels and depressive symptoms: a meta-analysis.",
    "Statin therapy and incident type 2 diabetes in randomized trials.",
    "Aerobic exercise training increases hippocampal volume and improves memory.",
    "Tobacco smoking and the epidemiology of lung carcinoma.",
]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # On this shared 2-core box, two OpenMP threads stall at every barrier when another job holds a core
    # (8x slower measured); one thread keeps these tiny forward/backward passes fast.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


EXTRA = ["Coffee consumption and liver enzymes.", "Sleep duration in adolescents."]


def _grads(model: torch.nn.Module, loss_fn: torch.nn.Module) -> dict[str, torch.Tensor]:
    named = list(model.named_parameters()) + [(f"loss.{n}", p) for n, p in loss_fn.named_parameters()]
    return {name: p.grad.clone() for name, p in named if p.grad is not None}


def _plain(model, loss_fn, groups):
    model.zero_grad(set_to_none=True)
    loss_fn.zero_grad(set_to_none=True)
    q, d = embed(model, groups[0]), embed(model, groups[1])  # (B, D)
    extra = embed(model, groups[2]) if groups[2] else None  # (M, D)
    loss = loss_fn(q, d, extra)
    loss.backward()
    return loss.detach(), _grads(model, loss_fn)


def _cached(model, loss_fn, groups, mini_batch_size):
    model.zero_grad(set_to_none=True)
    loss_fn.zero_grad(set_to_none=True)
    loss = cached_loss_backward(
        lambda texts: embed(model, texts), groups, loss_fn, mini_batch_size=mini_batch_size
    )
    return loss, _grads(model, loss_fn)


def _assert_same(plain, cached):
    (loss_a, grads_a), (loss_b, grads_b) = plain, cached
    assert torch.allclose(loss_a, loss_b, rtol=1e-5, atol=1e-6)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 10
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], rtol=1e-3, atol=1e-6), name


@pytest.mark.parametrize(
    ("loss_fn", "mini_batch_size", "with_extra"),
    [
        (InfoNCELoss(0.05), 2, False),
        (InfoNCELoss(0.05, symmetric=True, learn_temperature=True), 3, True),
        (AnInfoNCELoss(384, init_temperature=0.05), 2, True),
    ],
    ids=["infonce", "symmetric-learned-tau", "aninfonce"],
)
def test_cached_loss_and_gradients_equal_the_plain_loss(base_encoder, loss_fn, mini_batch_size, with_extra):
    # Given: the real MiniLM with dropout off, short inputs
    model = base_encoder.model
    model.max_seq_length = 32
    model.eval()
    groups = [QUERIES, DOCS, EXTRA if with_extra else []]
    # When / Then: mini-batched GradCache reproduces the full-batch loss and every gradient (incl. τ / Λ)
    _assert_same(_plain(model, loss_fn, groups), _cached(model, loss_fn, groups, mini_batch_size))


def test_dropout_masks_are_replayed(base_encoder):
    # Given: dropout on. With one chunk per group, GradCache's replays must draw the very masks that a
    # plain pass from the same seed draws; a wrong RNG replay gives different gradients.
    model = base_encoder.model
    model.max_seq_length = 32
    model.train()
    loss_fn = InfoNCELoss(0.05)
    groups = [QUERIES, DOCS, []]
    torch.manual_seed(7)
    plain = _plain(model, loss_fn, groups)
    torch.manual_seed(7)
    cached = _cached(model, loss_fn, groups, mini_batch_size=len(QUERIES))
    _assert_same(plain, cached)
    torch.manual_seed(8)
    other = _plain(model, loss_fn, groups)  # sanity: dropout really changes the result
    assert not torch.allclose(other[0], plain[0])
