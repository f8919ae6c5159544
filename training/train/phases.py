"""What the trainer's phases hand each other: `Run` (prepare → fit, finalize) and `Fitted` (fit →
finalize)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from contract.encoding.encoder import Encoder
from training.data.retrieval_data import Pair, RetrievalData
from training.eval.evaluate import EvalResult
from training.hybrid.mode_metrics import ModeScorer
from training.losses.an_info_nce import AnInfoNCELoss
from training.losses.info_nce import InfoNCELoss
from training.train.device import Precision


@dataclass(frozen=True)
class LiveReference:
    """A live bundle standing in for the base model's corpus encode: its query encoder and its document
    vectors (read back from its index) are the "before" evaluation and the mining ranking of a full
    retrain, so the retrain encodes the corpus once, with the tuned model (training/publish/pipeline.py)."""

    encoder: Encoder
    doc_ids: list[str]
    doc_embeddings: np.ndarray  # (n_docs, D) normalised rows, in doc_ids order
    version: str


@dataclass
class Run:
    """What `prepare` hands the loop: data, the base model and its evaluation, and the training examples."""

    device: torch.device
    precision: Precision
    rng: np.random.Generator
    train_data: RetrievalData
    eval_data: RetrievalData
    encoder: Encoder
    base_source: str
    eval_seq_length: int  # evaluation and the saved model keep the base model's limit
    base: EvalResult
    pairs: list[Pair]  # labelled pairs, then corpus-title pseudo-pairs
    n_pseudo: int
    doc_texts: list[str]  # corpus position -> document_text
    position: dict[str, int]  # document id -> corpus position
    qrels: dict[str, dict[str, int]]  # with each pseudo-query's own document
    known: dict[str, set[int]]  # query id -> positions of its known positives (never negatives)
    mined: list[list[int]]  # per pair: mined hard-negative positions
    val_data: RetrievalData | None = (
        None  # the validation carve: held out of training (training.data.validation_carve)
    )
    base_val: dict[str, float | int] | None = None  # base metrics on it, measured before training
    modes: ModeScorer | None = None  # metrics per retrieval mode (training.hybrid.mode_metrics)
    base_modes: dict[str, Any] | None = None
    base_is: str = "base model"  # what `base` measured: the base model, or a live bundle's vectors
    started: float = 0.0  # perf_counter at the run's start: a time budget counts from it
    frozen: list[torch.nn.Parameter] = field(
        default_factory=list
    )  # freeze_layers' (training/train/freeze.py)


@dataclass
class Fitted:
    loss_fn: InfoNCELoss | AnInfoNCELoss
    log: list[dict[str, Any]]
    train_seconds: float
    budget: dict[str, Any] | None = None  # the time budget's record (training/train/budgeted.py)
