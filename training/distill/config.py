"""DistillConfig: every knob of query-encoder distillation (training/distill/students_fit.py). Each field's
description is the help of its `python -m training distill` option (training/cli/distill.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.config import as_in_training
from contract.jobs.plan import Variant  # a plan names the variants it publishes

if TYPE_CHECKING:
    from contract.jobs.plan import PublicationPlan


class DistillConfig(BaseModel):
    """Every knob of query-encoder distillation; recorded in the manifest with the variants."""

    model_config = ConfigDict(extra="forbid")

    variants: list[Variant] = Field(
        ["distilled", "static"],
        description="Comma-separated: distilled (truncated transformer), static (token table served in numpy).",
    )
    layers: int = Field(2, ge=1, le=6, description="Transformer layers the distilled encoder keeps.")
    epochs: int = Field(3, ge=1, description="Epochs of the distilled transformer.")
    # 3 before: 6 with 3 sentences/doc won on validation (see match_weight)
    static_epochs: int = Field(6, ge=1, description="Epochs of the static table.")
    batch_size: int = Field(
        64, ge=2, description="Training pairs per batch; the batch's other documents are in-batch negatives."
    )
    # truncated transformer (AdamW); 1e-4 before: 1e-3 scored 0.40 after 100 steps vs 0.33 (3e-4: 0.37)
    lr: float = Field(1e-3, gt=0, description="Learning rate of the distilled transformer (AdamW).")
    static_lr: float = Field(
        5e-3, gt=0, description="Learning rate of the static table (Adam); its rows start near their targets."
    )
    # sparse gradients + SparseAdam: faster steps, a little worse (training/distill/students_fit.py)
    static_sparse: bool = Field(
        False, description="Sparse gradients (SparseAdam) for the static table: faster steps, a little worse."
    )
    # 0 = InfoNCE only. 2.0 and sentences_per_doc 3 (with static_epochs 6): the static student's
    # validation nDCG@10 0.586 vs 0.554 with 1.0 / 1 / 3 (paired bootstrap +0.003..+0.064, 107 queries of a
    # carve of whole query groups; bench/distill/distill_search.py, bench/results/distill_search.json)
    match_weight: float = Field(
        2.0, ge=0, description="Weight of 1 - cos(student, full) added to InfoNCE (0 = InfoNCE only)."
    )
    hard_negatives: int = Field(
        1,
        ge=0,
        description="Hard negatives per pair, mined from the full model's ranking (0 disables mining).",
    )
    # the rank window and margin of the same mining as fine-tuning's (mine_hard_negatives), its words too
    hard_negative_rank_min: int = Field(3, ge=0, description=as_in_training("hard_negative_rank_min"))
    hard_negative_rank_max: int = Field(50, ge=1, description=as_in_training("hard_negative_rank_max"))
    hard_negative_margin: float = Field(0.05, ge=0, description=as_in_training("hard_negative_margin"))
    title_queries: int = Field(5000, ge=0, description="Documents whose title becomes a pseudo-query.")
    sentence_queries: int = Field(5000, ge=0, description="Documents whose sentences become pseudo-queries.")
    sentences_per_doc: int = Field(3, ge=1, description="Sentences drawn from each of those documents.")
    span_queries: int = Field(
        0,
        ge=0,
        description="Documents from which word spans become pseudo-queries, each span as long as a training "
        "query drawn at random (short queries get short spans).",
    )
    spans_per_doc: int = Field(2, ge=1, description="Spans drawn from each of those documents.")
    max_seq_length: int = Field(
        64,
        ge=8,
        le=512,
        description="Token limit while training the distilled transformer (queries are short).",
    )
    sif_a: float = Field(
        1e-3, gt=0, description="SIF weight a/(a+p(token)) of the static table's initialisation."
    )
    static_weighting: Literal["corpus", "zipf"] = Field(
        "corpus",
        description="p(token) of the SIF weights: corpus = counted in the corpus and training texts; zipf = "
        "Zipf's law over the tokenizer's vocabulary order (model2vec's, corpus-independent).",
    )
    static_pca_dims: int | None = Field(
        None,
        ge=8,
        description="Static table as model2vec builds it: token vectors centred and reduced by PCA to this "
        "many dimensions, with a trained linear map back to the model's space (folded into the served "
        "table). Unset: the full-dimension table, no map.",
    )
    static_init_vocab: Literal["full", "seen"] = Field(
        "full",
        description="Static table initialisation: full passes every vocabulary token through the model "
        "(model2vec); seen only the corpus' and training texts' tokens (the others start at zero), ~10x less "
        "work, for tests and quick runs.",
    )
    max_steps: int | None = Field(
        None, ge=1, description="Stop each variant after this many steps (tests, smoke runs)."
    )
    seed: int = Field(
        0, description="Seed of numpy and torch: pseudo-queries, negatives, batches, the risk's bootstrap."
    )


def publication_distill(publication: PublicationPlan) -> DistillConfig | None:
    """The distillation a plan's publication asks for (its variants with default settings), or None when
    it says no; where None (the default) cannot run is the caller's to judge. `python -m training distill`
    has every knob."""
    if publication.distill is False:
        return None
    return DistillConfig(variants=publication.distill_variants)
