"""Every training knob in one block (nanoGPT habit); the config is saved with every artifact.

Each field's `description` is its documentation: `python -m training train --help` shows it (the options
are generated from these fields, training/cli/config_options.py), and it travels in the JSON schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.limits import (
    MAX_BATCH,
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_FREEZE_LAYERS,
    MAX_GRAD_NORM,
    MAX_LR,
    MAX_MARGIN,
    MAX_NEGATIVES_PER_PAIR,
    MAX_SEED,
    MAX_STEPS,
    MAX_TEMPERATURE,
    MAX_TIME_BUDGET_S,
    MAX_WEIGHT_DECAY,
)

SPLIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # contract.jobs.confine checks the same
# The one default InfoNCE temperature τ (sentence-transformers' MultipleNegativesRankingLoss scale 20).
# It lives here, in a base module, because TrainConfig sits below every layer; everything else reads it as
# contract.encoding.similarity.DEFAULT_TEMPERATURE, beside the Similarity that owns τ.
DEFAULT_TEMPERATURE = 0.05


class TrainConfig(BaseModel):
    """Hyper-parameters of one fine-tuning run. Written to `<out>/config.json` and into bundles."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # data (split names are plain names, never paths: they are joined into qrels/<split>.tsv)
    train_split: str = Field(
        "train",
        pattern=SPLIT_PATTERN,
        description="qrels/<split>.tsv of a BEIR folder used for training (a pairs file: 'train').",
    )
    eval_split: str = Field(
        "test",
        pattern=SPLIT_PATTERN,
        description="qrels/<split>.tsv with the held-out queries for base-vs-tuned metrics and the gap report.",
    )
    base_model: str | None = Field(
        None,
        description="Local sentence-transformers model folder to start from; default (None): the packaged "
        "all-MiniLM-L6-v2.",
    )
    # 128 halves the cost of a step on CPU (scifact: bench/training/train_scifact.py)
    max_seq_length: int = Field(
        128,
        ge=16,
        le=512,
        description="Token limit while training (longer texts are cut). Evaluation and the saved model keep "
        "the base model's own limit (256 for all-MiniLM-L6-v2); shorter training inputs are much cheaper on CPU.",
    )
    corpus_title_pairs: int = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="Add n unsupervised pairs from the corpus itself: a document's title as a pseudo-query "
        "for its body text (title removed). Uses no queries or labels, only the corpus that gets indexed "
        "(GPL-style domain adaptation).",
    )
    corpus_sentence_pairs: int = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="Add n unsupervised pairs from the corpus: one sentence of a document as a pseudo-query "
        "for the rest of it (inverse cloze).",
    )
    validation_fraction: float = Field(
        0.2,
        ge=0.0,
        lt=1.0,
        description="Share of the training queries held out (seeded) and not trained on: it chooses the "
        "bundle's default search mode and hybrid fusion parameters (training.data.validation_carve). 0 = train on all "
        "(hybrid stays untuned).",
    )

    # loss
    loss: Literal["infonce", "aninfonce"] = Field(
        "infonce",
        description="infonce (cosine / τ logits) or aninfonce (learned diagonal Λ, served as L2 on "
        "√Λ-scaled vectors).",
    )
    temperature: float = Field(
        DEFAULT_TEMPERATURE,
        le=MAX_TEMPERATURE,
        gt=0,
        description="InfoNCE temperature τ (MultipleNegativesRankingLoss scale = 1/τ, 20 at the default); "
        "AnInfoNCE starts at Λ = 1/τ.",
    )
    learn_temperature: bool = Field(
        False,
        description="Learn τ (as log 1/τ, CLIP-style, 1/τ capped at 100) at lambda_lr; the final τ is saved.",
    )
    symmetric: bool = Field(
        True, description="Average the query→document and document→query cross-entropies."
    )
    decoupled: bool = Field(
        False,
        description="Decoupled contrastive loss: the positive is left out of the denominator (Yeh et al. 2022).",
    )
    debiased_tau_plus: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Debiased contrastive loss with class prior τ⁺ (Chuang et al. 2020); 0 disables.",
    )
    lambda_lr: float = Field(
        1e-2,
        le=MAX_LR,
        gt=0,
        description="Learning rate of the loss's own parameters: AnInfoNCE's w (Λ = softplus(w)) or a learned τ.",
    )

    # 0 (off) until measured for quality: bench/training/step_breakdown.py found 42 % of the demo corpus's
    # tokenised positions were padding, 3 % of scifact's
    length_buckets: int = Field(
        0,
        ge=0,
        le=64,
        description="Batches built by length: the training pairs split into this many buckets by their "
        "document's length (quantiles), batched within a bucket, the batches shuffled; a batch then pads "
        "to its own length and its in-batch negatives stay random within the bucket. 0 or 1: off.",
    )

    # negatives
    random_negatives: int = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="Extra negatives per batch: k corpus documents drawn uniformly (never a batch query's "
        "positive).",
    )
    # 3 mined negatives and lr 6e-5: scifact validation nDCG@10 0.6467 vs 0.6129 for 1 and 3e-5, paired
    # bootstrap +0.013 .. +0.058 (bench/training/recipe_search.py, docs/bench-retired.md, recipe_compare). Per CPU-minute
    # (bench/training/recipe_cost.py, bench/results/recipe_cost.txt): 1 negative ties on the demo corpus at 63 % of
    # the time but loses 0.030 on scifact; 64 training tokens halve a step and lose 0.005 / 0.008.
    hard_negatives: int = Field(
        3,
        le=MAX_NEGATIVES_PER_PAIR,
        ge=0,
        description="Mined negatives per training pair, ranked by the base model (0 disables mining).",
    )
    hard_negative_rank_min: int = Field(
        3,
        le=MAX_COUNT,
        ge=0,
        description="Skip ranks below this when mining: the very top often holds unlabelled positives.",
    )
    hard_negative_rank_max: int = Field(
        50,
        le=MAX_COUNT,
        ge=1,
        description="Sample hard negatives among the ranks [hard_negative_rank_min, hard_negative_rank_max).",
    )
    hard_negative_margin: float = Field(
        0.05,
        le=MAX_MARGIN,
        ge=0.0,
        description="Drop candidates scoring above (positive's score − margin): likely false negatives.",
    )

    # optimisation
    # 2 epochs: scifact validation nDCG@10 0.6467 vs 0.6413 at 3 (bench/training/recipe_search.py)
    epochs: int = Field(2, le=MAX_EPOCHS, ge=1, description="Passes over the training pairs.")
    batch_size: int = Field(
        32,
        le=MAX_BATCH,
        ge=2,
        description="(query, positive) pairs per step; each query sees batch_size − 1 in-batch negatives.",
    )
    # 6e-5 with 3 mined negatives: see hard_negatives
    lr: float = Field(6e-5, le=MAX_LR, gt=0, description="Peak learning rate of the encoder (AdamW).")
    weight_decay: float = Field(
        0.01,
        le=MAX_WEIGHT_DECAY,
        ge=0,
        description="AdamW weight decay (not applied to biases and LayerNorm weights).",
    )
    warmup_ratio: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of the steps with a linear learning-rate warmup; then linear decay to 0.",
    )
    max_grad_norm: float = Field(
        1.0,
        le=MAX_GRAD_NORM,
        ge=0,
        description="Clip the encoder's gradient norm at this value; 0 disables clipping.",
    )
    # on: a default step's peak resident memory 1.9 GB instead of 7.0 GB, for 1.39x its seconds (scifact,
    # 32 pairs x 3 mined negatives, 128 tokens: bench/training/train_step_cost.py, bench/results/train_step_cost.txt)
    grad_cache: bool = Field(
        True,
        description="GradCache (Gao et al. 2021): exact large-batch gradients with the memory of "
        "mini_batch_size; the batch size is no longer bounded by memory. Off: one forward pass instead of "
        "two, about a quarter less time a step, about 3.7x the memory.",
    )
    mini_batch_size: int = Field(
        16, le=MAX_BATCH, ge=1, description="Texts embedded at once under grad_cache."
    )
    # 0 until measured per CPU-minute (bench/results/freeze_layers_demo.txt): backward is about a third of a
    # step and each layer's forward about 5 % (bench/results/step_breakdown.txt)
    freeze_layers: int = Field(
        0,
        ge=0,
        le=MAX_FREEZE_LAYERS,
        description="Freeze the embeddings and the first k transformer layers (no gradients, no backward "
        "through them): cheaper steps, fewer weights adapted. At most the model's layer count − 1; 0: all train.",
    )
    max_steps: int | None = Field(
        None,
        le=MAX_STEPS,
        ge=1,
        description="Stop after this many optimiser steps (tests, smoke runs); the schedule is fitted to it.",
    )
    time_budget_s: float | None = Field(
        None,
        gt=0,
        le=MAX_TIME_BUDGET_S,
        description="Wall-clock seconds for the whole run (train, corpus encode, publication): the run "
        "estimates the encode and publication, trains until the rest is spent (validation nDCG@10 at "
        "intervals, the best checkpoint kept) and fails at once when even the encode and publication do not "
        "fit. None: the recipe's steps, no budget (training/train/budget.py).",
    )
    seed: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description="Seed of python, numpy and torch: batches, negatives and dropout are reproducible.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="auto (cuda when torch sees a GPU, else cpu), cpu or cuda. On cuda: bf16 autocast (fp16 "
        "with a grad scaler where bf16 is unsupported); on cpu: fp32 unless cpu_bf16 says otherwise.",
    )
    cpu_bf16: Literal["auto", "on", "off"] = Field(
        "auto",
        description="bf16 autocast for training on cpu (fp32 weights and loss): auto = on only where the CPU "
        "has native bf16 (AVX512-BF16 or AMX), on = always (emulated and slower elsewhere), off = fp32. "
        "timings.json records what ran and why.",
    )

    corpus_encoder: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        "auto",
        description="What encodes the tuned model's corpus (the one corpus encode of a retrain): auto = the "
        "fastest of torch and its ONNX export (fp32 and int8) measured here, within 0.005 "
        "nDCG@10 of torch's vectors on a probe pool (corpora of 5,000+ documents; smaller ones: torch).",
    )

    # evaluation / report
    eval_max_queries: int | None = Field(
        None,
        le=MAX_COUNT,
        ge=1,
        description="Evaluate on a seeded subsample of this many held-out queries (tests, quick runs).",
    )
    report: bool = Field(
        True, description="Compute the generalization-gap report into OUT/report/ after training."
    )

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


def as_in_training(field: str) -> str:
    """The description of a TrainConfig field, for another config's field that means the same (the query-side
    retrain's and distillation's options then read the same help as training's)."""
    return str(TrainConfig.model_fields[field].description)
