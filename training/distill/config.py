"""DistillConfig: every knob of query-encoder distillation (training/distill/students_fit.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Variant = Literal["distilled", "static"]


class DistillConfig(BaseModel):
    """Every knob of query-encoder distillation; recorded in the manifest with the variants."""

    model_config = ConfigDict(extra="forbid")

    variants: list[Variant] = ["distilled", "static"]
    layers: int = Field(2, ge=1, le=6)  # transformer layers kept by `distilled`
    epochs: int = Field(3, ge=1)
    static_epochs: int = Field(6, ge=1)  # 3 before: 6 with 3 sentences/doc won on validation (below)
    batch_size: int = Field(64, ge=2)
    # truncated transformer (AdamW); 1e-4 before: 1e-3 scored 0.40 after 100 steps vs 0.33 (3e-4: 0.37)
    lr: float = Field(1e-3, gt=0)
    static_lr: float = Field(5e-3, gt=0)  # static table (Adam); its rows start near their targets
    static_sparse: bool = False  # sparse gradients + SparseAdam: faster steps, a little worse (distill.py)
    # 0 = InfoNCE only. 2.0 and sentences_per_doc 3 (with static_epochs 6): the static student's
    # validation nDCG@10 0.586 vs 0.554 with 1.0 / 1 / 3 (paired bootstrap +0.003..+0.064, 107 queries of a
    # carve of whole query groups; bench/distill_search.py, bench/results/distill_search.json)
    match_weight: float = Field(2.0, ge=0)
    hard_negatives: int = Field(1, ge=0)  # mined per pair from the full model's ranking
    hard_negative_rank_min: int = Field(3, ge=0)
    hard_negative_rank_max: int = Field(50, ge=1)
    hard_negative_margin: float = Field(0.05, ge=0)
    title_queries: int = Field(5000, ge=0)  # documents whose title becomes a pseudo-query
    sentence_queries: int = Field(5000, ge=0)  # documents whose sentences become pseudo-queries
    sentences_per_doc: int = Field(3, ge=1)  # sentences drawn from each of those documents
    max_seq_length: int = Field(64, ge=8, le=512)  # while training the transformer; queries are short
    sif_a: float = Field(1e-3, gt=0)  # SIF weight a/(a+p(token)) of the static initialisation
    # "full": every vocabulary token through the model (model2vec); "seen": only tokens of the corpus and
    # the training texts (the others start at zero), ~10x less work: for tests and quick runs
    static_init_vocab: Literal["full", "seen"] = "full"
    max_steps: int | None = Field(None, ge=1)  # per variant; tests and smoke runs
    seed: int = 0
