"""A query-side version staged from its parent: the parent's index, documents, BM25 and document tower
shared (hard links), a new query tower, its own metrics, fusion, report and manifest.

Shared, never copied or re-encoded: `index.faiss`, `ids.json`, `docs.sqlite`, `lexical/` and the parent's
document tower, which becomes `model/document/` (a two-tower model folder: contract/encoding/encoder.py).
Each is a hard link to the parent's file: one inode, the parent's bytes, so a 1M-document index costs no
copy and no disk. The manifest still lists every file's sha256 and publishing verifies them all
(contract.bundles.bundle.validate), so a shared file damaged later fails both versions' checks. Published
versions are never written to, so sharing an inode is safe; pruning the parent only drops its own link.
Where a hard link is impossible (another filesystem), the file is copied and the record says so.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contract.atomic import write_json_atomic, write_text_atomic
from contract.bundles.bundle import (
    DOCS_FILE,
    IDS_FILE,
    INDEX_FILE,
    LEXICAL_DIR,
    MANIFEST_FILE,
    MODEL_DIR,
    Bundle,
    Manifest,
    checksums,
    new_version_id,
)
from contract.encoding.encoder import DOCUMENT_DIR
from contract.encoding.similarity import Similarity
from contract.index.fusion import DEFAULT_DEPTH, MODES, FusionParams
from contract.index.lexical_index import LexicalIndex
from contract.index.vector_index import Ranking
from contract.jobs.plan import PLAN_KEY, RetrainPlan
from training.bundle.portable_paths import portable
from training.bundle.store import FINGERPRINT_KEY
from training.cards.bundle_card import write_bundle_model_card
from training.distill.pairs import DistillPairs
from training.distill.query_loop import LoopResult
from training.hybrid.fusion_tuning import metrics_of, runs_for_mode, tune

logger = logging.getLogger(__name__)

EXTRAS_KEY = "query_retrain"  # manifest.extras: the parent, the tower's kind, its training and what is shared
# extras of the parent that describe its own build, not this version's
PARENT_ONLY_EXTRAS = ("onnx", "query_encoders", "training_metrics", "distilled_from", "reindexed_from")
SHARED_FILES = (INDEX_FILE, IDS_FILE, DOCS_FILE)
DOCUMENT_TOWER = f"{MODEL_DIR}/{DOCUMENT_DIR}/"


def shared_target(rel: str, parent_two_towers: bool) -> str | None:
    """Where a parent's file goes in the child (None: not shared). The parent's document tower is its
    `model/document/` (two towers) or its whole `model/` folder, which becomes the child's `model/document/`."""
    if rel in SHARED_FILES or rel.startswith(LEXICAL_DIR + "/"):
        return rel
    if parent_two_towers:
        return rel if rel.startswith(DOCUMENT_TOWER) else None
    if rel.startswith(MODEL_DIR + "/"):
        return DOCUMENT_TOWER + rel.removeprefix(MODEL_DIR + "/")
    return None


def link_shared(parent: Path, staging: Path, parent_files: Mapping[str, str]) -> dict[str, str]:
    """Hard-link the parent's shared files into `staging`; {child path: "linked" | "copied"}."""
    two_towers = any(rel.startswith(DOCUMENT_TOWER) for rel in parent_files)
    done: dict[str, str] = {}
    for rel in sorted(parent_files):
        target = shared_target(rel, two_towers)
        if target is None:
            continue
        src, dst = parent / rel, staging / target
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
            done[target] = "linked"
        except OSError as exc:  # another filesystem, or links not allowed: a copy still verifies
            logger.warning("cannot hard-link %s (%s): copying it", rel, exc.strerror or exc)
            shutil.copy2(src, dst)
            done[target] = "copied"
    linked = sum(1 for v in done.values() if v == "linked")
    logger.info(
        "shared %d files with the parent (%d hard links, %d copies)", len(done), linked, len(done) - linked
    )
    return done


def dense_runs(
    index: Any, similarity: Similarity, qids: Sequence[str], query_emb: np.ndarray, depth: int
) -> dict[str, Ranking]:
    """Each query's ranking through the live index (positions, scores), as the API searches."""
    rows = index.search(similarity.to_index_space(query_emb), depth)
    return {q: (rows[i][0], rows[i][1]) for i, q in enumerate(qids)}


def retune_modes(
    lexical: LexicalIndex | None,
    doc_ids: Sequence[str],
    validation: tuple[dict[str, Ranking], Mapping[str, str], Mapping[str, Mapping[str, int]]] | None,
    test: tuple[dict[str, Ranking], Mapping[str, str], Mapping[str, Mapping[str, int]]],
    *,
    inherited: Mapping[str, Any] | None = None,
    depth: int = DEFAULT_DEPTH,
) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """Fusion tuned again for the new query tower on the validation carve, and every mode scored on test:
    (extras["retrieval"] record, {mode: metrics}). `validation` / `test`: (dense runs, queries, qrels).
    Without validation queries the parent's record (`inherited`: its default mode and fusion) is kept.
    Without a BM25 index (a bundle from before hybrid search) only dense is scored and served."""
    test_dense, test_queries, test_qrels = test
    if lexical is None:
        return {"default_mode": "dense", "fusion": FusionParams(depth=depth).record(), "validation": None}, {
            "dense": metrics_of(test_dense, test_qrels, list(doc_ids))
        }
    if validation is not None and validation[1]:
        val_dense, val_queries, val_qrels = validation
        val_lex = dict(zip(val_queries, lexical.search(list(val_queries.values()), depth), strict=True))
        record = tune(val_dense, val_lex, val_qrels, list(doc_ids), depth=depth)
    elif inherited is not None and inherited.get("fusion"):
        record = {"default_mode": str(inherited.get("default_mode", "dense")), "fusion": dict(inherited["fusion"]),
                  "validation": None, "inherited_from_parent": True}  # fmt: skip
    else:
        record = {"default_mode": "dense", "fusion": FusionParams(depth=depth).record(), "validation": None}
    params = FusionParams.from_record(record["fusion"])
    test_lex = dict(zip(test_queries, lexical.search(list(test_queries.values()), depth), strict=True))
    by_mode = {
        m: metrics_of(runs_for_mode(m, test_dense, test_lex, params), test_qrels, list(doc_ids))
        for m in MODES
    }
    record["lexical"] = lexical.params
    return record, by_mode


@dataclass(frozen=True)
class TrainedTower:
    """What the query-side retrain trained: against which parent, how, and what it shares with it."""

    parent: str
    loop: LoopResult
    shared: Mapping[str, str]  # child path -> linked | copied
    pairs: DistillPairs


@dataclass(frozen=True)
class TowerScores:
    """The tuned tower scored: live vs tuned dense metrics, every mode, fusion and the eval fingerprint."""

    base: dict[str, float]
    tuned: dict[str, float]
    retrieval: dict[str, Any]  # extras["retrieval"]
    by_mode: dict[str, dict[str, float]]
    fingerprint: str


def write_manifest(
    staging: Path, live: Bundle, plan: RetrainPlan, tower: TrainedTower, scores: TowerScores
) -> None:
    """The parent's manifest as the start: a new version id, this version's metrics, record and checksums.
    The plan is recorded once (extras["retrain_plan"], its TrainConfig as `training_config`)."""
    from datetime import UTC, datetime

    from contract.bundles.run_record import TrainingRecord

    manifest = live.manifest.model_copy(deep=True)
    manifest.version = new_version_id()
    manifest.created_at = datetime.now(UTC)
    manifest.extras = {k: v for k, v in manifest.extras.items() if k not in PARENT_ONLY_EXTRAS}
    manifest.extras[FINGERPRINT_KEY] = scores.fingerprint
    manifest.extras["retrieval"] = scores.retrieval
    manifest.extras[PLAN_KEY] = plan.record()
    manifest.extras[EXTRAS_KEY] = _tower_record(plan, tower, live.manifest)
    manifest.metrics = {f"test.{m}": v for m, v in scores.by_mode.items()}
    manifest.metrics["test"] = scores.by_mode[scores.retrieval["default_mode"]]
    manifest.training_config = TrainingRecord.model_validate(
        {"config": plan.training.model_dump(mode="json"), "created_at": manifest.created_at.isoformat()}
    )
    manifest.extras = portable(manifest.extras)
    # model/README.md: the project's card from this version's records (not sentence-transformers' generic one)
    write_bundle_model_card(
        staging,
        training_config=manifest.training_config.model_dump(mode="json"),
        base_model=manifest.base_model,
        metrics=manifest.metrics,
        extras=manifest.extras,
    )
    manifest.files = checksums(staging)
    write_json_atomic(staging / MANIFEST_FILE, manifest.model_dump(mode="json"))


def _tower_record(plan: RetrainPlan, tower: TrainedTower, live_manifest: Manifest) -> dict[str, Any]:
    """extras["query_retrain"]: the parent, the query tower's kind, how its training went, what is shared.
    Its knobs are the plan's (extras["retrain_plan"]["query"]); manifests written before the plan carry
    them here as `config`, and the kind as `tower`."""
    loop = tower.loop
    return {
        "parent": tower.parent,
        "query_tower": plan.query.query_tower,
        "steps": loop.steps,
        "seconds": loop.seconds,
        "best_step": loop.best_step,
        "best_validation_ndcg@10": loop.best_validation,
        "validation_curve": loop.curve,
        "stopped_early": loop.stopped_early,
        "shared_files": dict(tower.shared),
        "documents_encoded": 0,
        # kept here so that `auto` still knows once the parent is pruned (training/distill/query_eligibility.py)
        "documents_adapted": documents_adapted(live_manifest),
    }


def documents_adapted(manifest: Manifest) -> bool | None:
    """Did a training run fine-tune the model that encoded this version's documents? A query-side version
    shares its parent's documents: its record says (None: a record from before it did, look at the parent)."""
    record = manifest.extras.get(EXTRAS_KEY)
    if isinstance(record, dict):
        adapted = record.get("documents_adapted")
        return adapted if isinstance(adapted, bool) else None
    return manifest.training_config.config is not None


def write_run(run_dir: Path, plan: RetrainPlan, tower: TrainedTower, scores: TowerScores) -> None:
    """The run folder, as `train` leaves one: config.json, metrics.json, train_log.jsonl."""
    pairs, parent, loop = tower.pairs, tower.parent, tower.loop
    n_queries = sum(1 for k in pairs.keys if ":" not in k)
    write_json_atomic(
        run_dir / "config.json",
        {"config": plan.training.model_dump(mode="json"), "query_retrain": plan.query.model_dump(mode="json"),
         "parent": parent, "data": {"source": plan.data.data_dir, "n_train_pairs": len(pairs.texts),
                                    "n_query_pairs": n_queries}},
    )  # fmt: skip
    write_json_atomic(
        run_dir / "metrics.json",
        {"base": scores.base, "tuned": scores.tuned, "base_is": f"live bundle {parent}'s query encoder",
         "validation_curve": loop.curve},
    )  # fmt: skip
    lines = "".join(json.dumps(r) + "\n" for r in loop.log)
    write_text_atomic(run_dir / "train_log.jsonl", lines)
