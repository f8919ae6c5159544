"""Every training knob in one block (nanoGPT habit); the config is saved with every artifact."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SPLIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # contract.jobs.confine checks the same


class TrainConfig(BaseModel):
    """Hyper-parameters of one fine-tuning run. Written to `<out>/config.json` and into bundles."""

    model_config = ConfigDict(extra="forbid")

    # data
    # split names are plain names, never paths (they are joined into qrels/<split>.tsv)
    train_split: str = Field("train", pattern=SPLIT_PATTERN)  # qrels/<train_split>.tsv (BEIR folders)
    # qrels/<eval_split>.tsv; held-out queries for metrics and the gap report
    eval_split: str = Field("test", pattern=SPLIT_PATTERN)
    base_model: str | None = None  # local sentence-transformers folder; None = packaged all-MiniLM-L6-v2
    # tokens while training (longer texts are cut); evaluation and the saved model keep the base model's
    # own limit (256 for all-MiniLM-L6-v2). 128 halves the cost of a step on CPU (scifact: bench/train_scifact.py)
    max_seq_length: int = Field(128, ge=16, le=512)
    # unsupervised in-domain pairs: n corpus documents' titles as pseudo-queries for their own body text
    # (no queries, no qrels: only the corpus the service indexes anyway; GPL-style domain adaptation)
    corpus_title_pairs: int = Field(0, ge=0)
    # n corpus documents, each as (one of its sentences → the rest): inverse-cloze pseudo-pairs
    corpus_sentence_pairs: int = Field(0, ge=0)
    # share of the training queries held out (seeded) as the validation split: not trained on; it picks the
    # served retrieval mode and fusion parameters (training.validation); 0 = train on every query
    validation_fraction: float = Field(0.2, ge=0.0, lt=1.0)

    # loss
    loss: Literal["infonce", "aninfonce"] = "infonce"
    temperature: float = Field(0.05, gt=0)  # τ; MNRL's scale = 1/τ (20)
    learn_temperature: bool = False  # learn log(1/τ) (CLIP-style, clipped at scale 100)
    symmetric: bool = True  # average query→doc and doc→query cross-entropies
    decoupled: bool = False  # DCL: positive left out of the denominator (Yeh et al. 2022)
    debiased_tau_plus: float = Field(0.0, ge=0.0, lt=1.0)  # Chuang et al. 2020 class prior τ⁺; 0 = off
    lambda_lr: float = Field(1e-2, gt=0)  # AnInfoNCE: learning rate of w, Λ = softplus(w)

    # negatives
    random_negatives: int = Field(0, ge=0)  # k extra corpus documents per batch, drawn uniformly
    hard_negatives: int = Field(1, ge=0)  # mined negatives per (query, positive) pair (0 = none)
    hard_negative_rank_min: int = Field(3, ge=0)  # skip the top ranks: likely unlabelled positives
    hard_negative_rank_max: int = Field(50, ge=1)  # sample among ranks [min, max)
    hard_negative_margin: float = Field(0.05, ge=0.0)  # keep negatives scoring < positive − margin

    # optimisation
    # 2 epochs: scifact nDCG@10 0.6643 vs 0.6626 at 3, in two thirds of the steps (bench/train_scifact.py)
    epochs: int = Field(2, ge=1)
    batch_size: int = Field(32, ge=2)  # (query, positive) pairs per step; k_in_batch = batch_size − 1
    lr: float = Field(3e-5, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup_ratio: float = Field(0.1, ge=0, le=1)
    max_grad_norm: float = Field(1.0, ge=0)  # 0 disables clipping
    grad_cache: bool = False  # GradCache (Gao et al. 2021): batch size no longer bounded by memory
    mini_batch_size: int = Field(16, ge=1)  # GradCache chunk size
    max_steps: int | None = Field(None, ge=1)  # stop early (tests, smoke runs)
    seed: int = 0
    # where the steps run: auto = cuda when available (bf16/fp16 autocast there), else cpu (fp32, as before)
    device: Literal["auto", "cpu", "cuda"] = "auto"

    # evaluation / report
    eval_max_queries: int | None = Field(None, ge=1)  # subsample held-out queries (tests)
    report: bool = True  # compute the generalization-gap report at the end

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.hard_negative_rank_max <= self.hard_negative_rank_min:
            raise ValueError("hard_negative_rank_max must be greater than hard_negative_rank_min")
        if self.loss == "aninfonce" and (
            self.decoupled or self.debiased_tau_plus > 0 or self.learn_temperature
        ):
            raise ValueError("decoupled, debiased and learn_temperature apply to loss=infonce only")
        if self.decoupled and self.debiased_tau_plus > 0:
            raise ValueError("choose decoupled or debiased, not both")
        return self
