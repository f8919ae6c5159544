"""QueryRetrainConfig: every knob of the query-side retrain (training/distill/query_retrain.py).

Each field is a `pipeline` option generated from it (training/cli/config_options.py) and a retrain job's
option (contract/jobs/queue.py: RetrainOptions has every field of both configs, checked when the job is
submitted), so the names carry a `query_` prefix where TrainConfig has the same word (`--query-lr` beside
`--lr`). A query-side retrain takes its seed, max_steps, splits and validation carve from its TrainConfig; whether a
retrain is query-side at all is the plan's `retrain_scope` (contract/jobs/plan.py).
It lives in the contract, beside TrainConfig, because the API validates job options with it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.config import as_in_training
from contract.limits import (
    MAX_BATCH,
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_LORA_ALPHA,
    MAX_LR,
    MAX_MARGIN,
    MAX_NEGATIVES_PER_PAIR,
    MAX_SENTENCES_PER_DOC,
    MAX_STEPS,
)

QueryTowerKind = Literal["lora", "full", "truncated"]


class QueryRetrainConfig(BaseModel):
    """How a query-side retrain trains its query tower; recorded in the bundle it publishes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    query_tower: QueryTowerKind = Field(
        "lora",
        description="The query tower: lora (LoRA adapters on the live query encoder, merged when saved), full "
        "(all its weights) or truncated (its first query_layers layers, all their weights).",
    )
    query_lora_rank: int = Field(32, ge=1, le=256, description="LoRA rank r (query_tower lora).")
    query_lora_alpha: int = Field(
        64, le=MAX_LORA_ALPHA, gt=0, description="LoRA alpha: the adapters' update is scaled by alpha / r."
    )
    query_layers: int = Field(4, ge=1, le=12, description="Transformer layers a truncated query tower keeps.")
    # 1e-3: the demo corpus' validation nDCG@10 0.7177 vs 0.7132 at 2e-4 (bench/training/query_retrain_search.py)
    query_lr: float = Field(
        1e-3, le=MAX_LR, gt=0, description="Peak learning rate of the query tower (AdamW)."
    )
    query_epochs: int = Field(
        4, le=MAX_EPOCHS, ge=1, description="Most passes over the query-side training pairs."
    )
    query_batch_size: int = Field(
        32,
        le=MAX_BATCH,
        ge=2,
        description="Pairs per step; the batch's other positives are in-batch negatives.",
    )
    query_symmetric: bool = Field(
        False,
        description="Also the document→query cross-entropy (CLIP-style symmetric InfoNCE); the documents stay fixed, "
        "the gradient still reaches only the query tower.",
    )
    query_hard_negatives: int = Field(
        3,
        le=MAX_NEGATIVES_PER_PAIR,
        ge=0,
        description="Negatives per pair mined from the live index (a search, no corpus encode); 0 disables.",
    )
    query_hard_negative_rank_min: int = Field(
        3, le=MAX_COUNT, ge=0, description=as_in_training("hard_negative_rank_min")
    )
    query_hard_negative_rank_max: int = Field(
        50, le=MAX_COUNT, ge=1, description=as_in_training("hard_negative_rank_max")
    )
    query_hard_negative_margin: float = Field(
        0.05, le=MAX_MARGIN, ge=0, description=as_in_training("hard_negative_margin")
    )
    query_title_queries: int = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="Documents whose title becomes a pseudo-query (distill's pseudo-queries).",
    )
    query_sentence_queries: int = Field(
        0,
        le=MAX_COUNT,
        ge=0,
        description="Documents whose sentences become pseudo-queries (distill's pseudo-queries).",
    )
    query_sentences_per_doc: int = Field(
        1, le=MAX_SENTENCES_PER_DOC, ge=1, description="Sentences drawn from each of those documents."
    )
    query_max_seq_length: int = Field(
        64, ge=8, le=512, description="Token limit of queries while training the query tower."
    )
    query_eval_every: int = Field(
        0,
        le=MAX_STEPS,
        ge=0,
        description="Steps between validation checks for early stopping (0 = at each epoch's end).",
    )
    query_patience: int = Field(
        2,
        le=MAX_EPOCHS,
        ge=1,
        description="Stop after this many validation checks without a better nDCG@10; the best is kept.",
    )
    query_report_pool: int = Field(
        50_000,
        le=MAX_COUNT,
        ge=100,
        description="Most corpus documents the gap report draws negatives from (the positives always).",
    )
