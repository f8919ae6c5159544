"""Where a full retrain starts: the base model (`start_from: base`, the default) or the model the collection
serves now (`start_from: live`).

Starting from the live model keeps what earlier retrains learned and learns the new pairs (the relevance
judgments above all) on top, instead of diluting them in the dataset's pairs from the base model again. On
the demo corpus with judged queries that rename common words (bench/gap/feedback_retrain.py, `--shift
jargon`; bench/results/feedback_retrain_jargon.txt), fine-tuning the live model on the judgments alone
(`feedback: only`, 4 epochs) raised nDCG@10 on held-out shifted queries by +0.021 (3 seeds, +0.018 to
+0.024) and left the test split unharmed. The gate still decides: a candidate that forgot the test split is
kept as a candidate, as any other.

Resolved once, before the scope (the pipeline, training/publish/pipeline.py): the live bundle's model folder
is copied into the run's work folder (a publish that prunes the live version mid-run cannot pull it away)
and becomes the run's `base_model`, so the scope is full and the manifest's training config names the
version it started from. The plan records what was taken and why (`start_reason`).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from contract.bundles.bundle import MODEL_DIR
from contract.bundles.folder import BundleFolder
from contract.encoding.encoder import DOCUMENT_DIR
from contract.errors import JobOptionsInvalid
from contract.jobs.plan import RetrainPlan

logger = logging.getLogger(__name__)


def resolve_start(plan: RetrainPlan, work_dir: str | Path) -> RetrainPlan:
    """The plan with its starting model resolved: unchanged for `base`; for `live`, a private copy of the live
    bundle's model as the base model (errors name the option when the collection cannot give one)."""
    if plan.start_from != "live":
        why = (
            "the base model" if plan.training.base_model is None else f"base_model {plan.training.base_model}"
        )
        return plan.model_copy(update={"start_reason": why})
    if plan.training.base_model is not None:
        raise JobOptionsInvalid(
            "start_from", "live, but base_model is given too: a run starts from one model"
        )
    if plan.scope == "query":
        raise JobOptionsInvalid(
            "start_from",
            "live applies to a full retrain; retrain_scope query already starts from the live bundle's query "
            "encoder",
        )
    folder = BundleFolder(plan.publication.bundles_dir)
    version = folder.current_version()
    if version is None:
        raise JobOptionsInvalid("start_from", "live, but the collection has no live bundle to start from")
    source = folder.version_path(version) / MODEL_DIR
    if not (source / "config.json").is_file():
        raise JobOptionsInvalid("start_from", f"live, but live bundle {version} holds no model folder")
    if (source / DOCUMENT_DIR).is_dir():
        raise JobOptionsInvalid(
            "start_from",
            f"live, but live bundle {version} is a query-side retrain (two towers): a full retrain starts from "
            "one model; start from base",
        )
    copy = Path(work_dir) / "live-model" / version
    if not copy.exists():  # a CLI's work folder keeps it for the next run from the same version
        partial = copy.with_name(f".{version}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial)
        try:
            os.replace(partial, copy)  # a crash mid-copy never leaves a half model that a later run trusts
        except OSError:
            if not copy.is_dir():
                raise
            shutil.rmtree(partial)  # a concurrent run from the same version renamed its copy first
    logger.info("start_from live: fine-tuning live bundle %s's model", version)
    training = plan.training.model_copy(update={"base_model": str(copy)})
    return plan.model_copy(update={"training": training, "start_reason": f"live bundle {version}"})
