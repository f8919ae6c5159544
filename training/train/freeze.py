"""`freeze_layers`: the embeddings and the first k transformer layers get no gradients.

With `requires_grad` off below layer k no tensor there needs a gradient, so autograd records nothing for
them and the backward pass stops at layer k: a step saves the backward of the frozen layers (backward is
about a third of a step, each layer's forward about 5 %: bench/results/step_breakdown.txt) and AdamW
keeps no moments for them. The forward still runs through every layer. Lower layers carry the most
general features, so they are the ones to keep (the layer-freezing baselines of Lee et al. 2019,
arXiv 1911.03090, keep most of fine-tuning's quality with the lower layers frozen).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from contract.errors import ConfigError


def transformer_parts(model: Any) -> tuple[nn.Module, nn.ModuleList]:
    """The token embeddings and the list of transformer layers of a sentence-transformers model
    (BERT-style `encoder.layer`, DistilBERT-style `transformer.layer`)."""
    backbone = model[0].auto_model  # sentence_transformers.models.Transformer's HF model
    for stack in ("encoder", "transformer"):
        layers = getattr(getattr(backbone, stack, None), "layer", None)
        if isinstance(layers, nn.ModuleList) and hasattr(backbone, "embeddings"):
            return backbone.embeddings, layers
    raise ConfigError(
        f"freeze_layers: {type(backbone).__name__} has no embeddings + encoder.layer stack to freeze "
        "(use freeze_layers=0)"
    )


def freeze_lower_layers(model: Any, k: int) -> list[nn.Parameter]:
    """Turn gradients off for the embeddings and layers [0, k); returns the frozen parameters (to thaw
    them after training). k = 0 freezes nothing; k must leave at least one layer training."""
    if k == 0:
        return []
    embeddings, layers = transformer_parts(model)
    if k >= len(layers):
        raise ConfigError(
            f"freeze_layers={k}: the model has {len(layers)} transformer layers, so at most "
            f"{len(layers) - 1} can be frozen (one must train)"
        )
    frozen = [p for part in (embeddings, *layers[:k]) for p in part.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    return frozen


def thaw(frozen: list[nn.Parameter]) -> None:
    """Gradients back on: the saved model and any later training see an ordinary model."""
    for p in frozen:
        p.requires_grad_(True)
