"""The best checkpoint of a budgeted run: validation nDCG@10 at intervals, the best weights kept in memory.

A budget may stop training anywhere in the schedule, so the run evaluates the model on the validation carve
(training.data.validation_carve: training queries held out of training) every EVALUATIONS-th of its steps
and at its last, keeps a copy of the best state (model and loss: a learned temperature is part of what is
published), and restores it before the model is saved: the bundle the gate sees is the best one measured,
not merely the last.

An evaluation encodes a pool, not the corpus (which costs as much as the corpus encode the budget reserves
for): the judged documents of the validation queries plus seeded random others, POOL_DOCS in all, searched
exactly (the corpus-encoder probe's method, training/export/corpus_encoder.py). `pool_ndcg` is the same
measurement on any encoder, so the published model can be checked against the recorded best.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from contract.encoding.encoder import Encoder, document_text
from training.data.retrieval_data import RetrievalData
from training.eval.search_metrics import search_metrics

logger = logging.getLogger(__name__)

POOL_DOCS = 512  # ~10 s of encode at MiniLM-L6's ~50 docs/s on 2 cores: four evaluations cost ~40 s
EVALUATIONS = 4  # evaluations over the planned steps (and one at the last step)


@dataclass(frozen=True)
class ValidationPool:
    qids: list[str]
    queries: list[str]
    qrels: dict[str, dict[str, int]]
    doc_ids: list[str]
    texts: list[str]


def validation_pool(val: RetrievalData, seed: int) -> ValidationPool | None:
    """The validation queries and a seeded pool of documents (their judged ones first); None without any."""
    qids = [q for q in val.queries if val.qrels.get(q)]
    if not qids:
        return None
    judged = list(dict.fromkeys(d for q in qids for d in val.qrels[q] if d in val.corpus))[:POOL_DOCS]
    chosen = set(judged)
    others = [d for d in val.corpus if d not in chosen]
    rng = np.random.default_rng([seed, 7])
    pool = judged + [others[i] for i in rng.permutation(len(others))[: max(0, POOL_DOCS - len(judged))]]
    texts = [document_text(val.corpus[d].title, val.corpus[d].text) for d in pool]
    return ValidationPool(qids, [val.queries[q] for q in qids], val.qrels, pool, texts)


def pool_ndcg(encoder: Encoder, pool: ValidationPool) -> float:
    """nDCG@10 of `encoder` on the pool: its query vectors against its document vectors, exact search."""
    queries = encoder.encode(pool.queries, kind="query")  # (nq, D)
    docs = encoder.encode(pool.texts, kind="document")  # (pool, D)
    metrics = search_metrics(
        encoder.similarity, queries, pool.qids, pool.qrels, pool.doc_ids, doc_embeddings=docs
    )
    return metrics["ndcg@10"]


@dataclass
class BestCheckpoint:
    """Evaluations so far and the best state (a deep copy on the CPU); `every` steps between evaluations."""

    pool: ValidationPool
    every: int
    eval_seq_length: int  # the length evaluation uses (the base model's), not training's
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    best_state: dict[str, Any] | None = None
    eval_s: float = 0.0  # the last evaluation's seconds (the budget keeps room for the next)

    @property
    def best(self) -> dict[str, Any] | None:
        return max(self.evaluations, key=lambda e: e["ndcg@10"]) if self.evaluations else None

    def due(self, step: int, total: int) -> bool:
        return step == total or step % self.every == 0

    def evaluate(self, step: int, model: Any, loss_fn: torch.nn.Module, elapsed_s: float) -> float:
        """Validate the model as it stands (eval mode, the evaluation length); keep it if it is the best."""
        started = time.perf_counter()
        train_length, model.max_seq_length = model.max_seq_length, self.eval_seq_length
        model.eval()
        try:
            ndcg = pool_ndcg(Encoder(model, loss_fn.similarity()), self.pool)  # type: ignore[operator]
        finally:
            model.train()
            model.max_seq_length = train_length
        best = self.best
        if best is None or ndcg > best["ndcg@10"]:
            self.best_state = _cpu_copy(model, loss_fn)
        self.eval_s = time.perf_counter() - started
        self.evaluations.append(
            {
                "step": step,
                "ndcg@10": ndcg,
                "elapsed_s": round(elapsed_s, 2),
                "seconds": round(self.eval_s, 2),
            }
        )
        logger.info("validation nDCG@10 %.4f at step %d (pool of %d)", ndcg, step, len(self.pool.doc_ids))
        return ndcg

    def restore(self, model: Any, loss_fn: torch.nn.Module, last_step: int) -> dict[str, Any]:
        """Load the best state into the model if it is not the last; the record of what was chosen, why."""
        best = self.best
        if best is None or self.best_state is None:
            return {"step": last_step, "why": "no validation evaluation ran"}
        if best["step"] != last_step:
            model.load_state_dict(self.best_state["model"])
            loss_fn.load_state_dict(self.best_state["loss"])
            why = (
                f"best validation nDCG@10 of {len(self.evaluations)} evaluations (the last step's was lower)"
            )
        else:
            why = f"the last step's: best validation nDCG@10 of {len(self.evaluations)} evaluations"
        return {"step": best["step"], "ndcg@10": best["ndcg@10"], "why": why}

    def record(self) -> dict[str, Any]:
        return {
            "pool_docs": len(self.pool.doc_ids),
            "queries": len(self.pool.qids),
            "evaluations": self.evaluations,
        }


def _cpu_copy(model: Any, loss_fn: torch.nn.Module) -> dict[str, Any]:
    """A copy of the model's and the loss's weights on the CPU (training keeps changing the originals)."""
    return {
        "model": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
        "loss": copy.deepcopy({k: v.detach().cpu() for k, v in loss_fn.state_dict().items()}),
    }
