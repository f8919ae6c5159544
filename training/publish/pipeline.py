"""The main job: train → report → index → publish through the quality gate.

`python -m training pipeline` (the README's demo) and the retrain job both run this. Each stage writes
its own artifacts (the run folder of `train`, then a bundle staged beside the published versions), so a
crash at any point leaves at most an unpublished folder behind — never a half-written live bundle.

`query.tower` chooses what is retrained: `full` (both towers: train, encode the corpus, index), `query`
(only a query tower against the live bundle's fixed document vectors and index:
training/distill/query_retrain.py, no corpus encode) or `auto` (query when the live bundle can serve as
the fixed side for this dataset, training.distill.query_retrain.query_side_blocker, else full).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.config import TrainConfig
from contract.defaults import GATE_METRIC, GATE_TOLERANCE, KEEP_VERSIONS, TARGET_RECALL
from contract.index.backend import BackendConfig
from contract.query_config import QueryRetrainConfig
from training.bundle.store import PublishResult
from training.distill.config import DistillConfig
from training.eval.embedding_cache import EmbeddingCache
from training.export.corpus_encoder import corpus_encoder_for
from training.publish.index_model import index_model
from training.train.phase_timer import PhaseTimer
from training.train.phases import LiveReference
from training.train.trainer import ProgressFn, TrainResult, train

logger = logging.getLogger(__name__)

CACHE_SUBDIR = "embeddings"


@dataclass
class PipelineResult:
    run_dir: Path
    train: TrainResult
    publish: PublishResult
    seconds: float
    timer: PhaseTimer  # wall time per phase; also in <run_dir>/timings.json
    tower: str = "full"  # what was retrained: full, or query (a query-side retrain)
    tower_reason: str = ""  # why, when `auto` chose


def default_run_dir(work_dir: str | Path) -> Path:
    """A fresh, time-sorted run folder under `work_dir`."""
    return Path(work_dir) / datetime.now(UTC).strftime("run-%Y%m%dT%H%M%SZ")


def run_pipeline(
    data_dir: str | Path,
    bundles_dir: str | Path,
    *,
    config: TrainConfig,
    work_dir: str | Path,
    index_kind: str = "auto",
    target_recall: float = TARGET_RECALL,
    force: bool = False,
    keep: int = KEEP_VERSIONS,
    gate_metric: str = GATE_METRIC,
    tolerance: float = GATE_TOLERANCE,
    onnx: bool = True,
    distill: DistillConfig | None = None,
    distill_optional: bool = False,
    on_progress: ProgressFn | None = None,
    show_progress: bool = True,
    checkpoint: Callable[[], None] | None = None,
    cache_dir: str | Path | None = None,
    backend: BackendConfig | None = None,
    query: QueryRetrainConfig | None = None,
) -> PipelineResult:
    """Fine-tune on `data_dir`, write the gap report, build the index and publish the bundle: live only if
    the quality gate accepts it (or `force`); `publish.reason` says why.

    `on_progress` sees every training step (and may raise to stop); `checkpoint` is called between the
    later phases and during document encoding, and cancels by raising (see `index_model`). Phase wall times
    go to `<run_dir>/timings.json`; corpus embeddings are cached in `cache_dir` (default
    `<work_dir>/embeddings`), so a later run on the same corpus skips the base model's encode.
    """
    started = time.perf_counter()
    timer = PhaseTimer()
    run_dir = default_run_dir(work_dir)
    tower, why = resolve_tower(query, data_dir, bundles_dir, config, backend)
    if tower == "query":
        assert query is not None
        return _query_side(
            data_dir, bundles_dir, config, query, run_dir, timer, started, why,
            onnx=onnx, distill=distill, force=force, keep=keep, gate_metric=gate_metric,
            tolerance=tolerance, on_progress=on_progress, checkpoint=checkpoint,
        )  # fmt: skip
    cache = EmbeddingCache(cache_dir if cache_dir is not None else Path(work_dir) / CACHE_SUBDIR)
    reference = _live_reference(bundles_dir, data_dir, config, backend, timer)
    trained = _train_phase(config, data_dir, run_dir, timer, cache, on_progress, show_progress, reference)
    if checkpoint is not None:
        checkpoint()
    logger.info("pipeline: indexing %s into %s", data_dir, bundles_dir)
    published = index_model(
        run_dir,
        data_dir,
        bundles_dir,
        index_kind=index_kind,
        target_recall=target_recall,
        split=config.eval_split,
        force=force,
        keep=keep,
        gate_metric=gate_metric,
        tolerance=tolerance,
        onnx=onnx,
        distill=distill,
        distill_split=config.train_split,
        distill_optional=distill_optional,
        evaluation=trained.evaluation,
        show_progress=show_progress,
        checkpoint=checkpoint,
        timer=timer,
        cache=cache,
        backend=backend,
    )
    _write_timings(timer, run_dir)
    return PipelineResult(run_dir, trained, published, time.perf_counter() - started, timer, "full", why)


def resolve_tower(
    query: QueryRetrainConfig | None,
    data_dir: str | Path,
    bundles_dir: str | Path,
    config: TrainConfig,
    backend: BackendConfig | None,
) -> tuple[str, str]:
    """(full | query, why): `auto` takes the query side whenever the live bundle can be its fixed side."""
    tower = query.tower if query is not None else "full"
    if tower == "full":
        return "full", "asked for (tower full)"
    if tower == "query":
        return "query", "asked for (tower query)"
    from training.bundle.store import BundleStore
    from training.distill.query_eligibility import query_side_blocker

    if backend is not None and backend.backend == "milvus":
        return "full", "the index backend is milvus"
    if config.base_model is not None:
        return "full", f"a base model was given ({config.base_model}): the document tower changes"
    blocker = query_side_blocker(BundleStore(bundles_dir), data_dir, config.eval_split)
    if blocker is not None:
        logger.info("tower auto: full retrain (%s)", blocker)
        return "full", blocker
    logger.info("tower auto: query-side retrain (the live bundle holds this dataset's documents)")
    return "query", "the live bundle holds this dataset's documents unchanged"


def _query_side(
    data_dir: str | Path,
    bundles_dir: str | Path,
    config: TrainConfig,
    query: QueryRetrainConfig,
    run_dir: Path,
    timer: PhaseTimer,
    started: float,
    why: str,
    **publish: Any,
) -> PipelineResult:
    """The query-side retrain (training/distill/query_retrain.py), as a PipelineResult."""
    from training.distill.query_retrain import query_side_retrain

    done = query_side_retrain(
        data_dir, bundles_dir, train_config=config, config=query, run_dir=run_dir, timer=timer, **publish
    )
    assert done.publish is not None  # published: the pipeline always publishes
    version_dir = Path(bundles_dir) / done.publish.version
    trained = TrainResult(
        out_dir=run_dir,
        model_dir=version_dir / "model",
        config_path=run_dir / "config.json",
        metrics_path=run_dir / "metrics.json",
        log_path=run_dir / "train_log.jsonl",
        report_dir=(version_dir / "report") if (version_dir / "report").is_dir() else None,
        base_metrics=done.base_metrics,
        tuned_metrics=done.tuned_metrics,
        train_seconds=done.loop.seconds,
    )
    _write_timings(timer, run_dir)
    return PipelineResult(run_dir, trained, done.publish, time.perf_counter() - started, timer, "query", why)


def _train_phase(
    config: TrainConfig,
    data_dir: str | Path,
    run_dir: Path,
    timer: PhaseTimer,
    cache: EmbeddingCache,
    on_progress: ProgressFn | None,
    show_progress: bool,
    reference: LiveReference | None = None,
) -> TrainResult:
    logger.info("pipeline: training into %s", run_dir)
    return train(
        config,
        data_dir,
        run_dir,
        on_progress=on_progress,
        show_progress=show_progress,
        timer=timer,
        cache=cache,
        reference=reference,
        corpus_encoder=corpus_encoder_for,  # torch or ONNX for the one corpus encode, measured here
    )


def _live_reference(
    bundles_dir: str | Path,
    data_dir: str | Path,
    config: TrainConfig,
    backend: BackendConfig | None,
    timer: PhaseTimer,
) -> LiveReference | None:
    """A full retrain over the live bundle's documents starts from its vectors: one corpus encode, not two."""
    if backend is not None and backend.backend == "milvus":
        return None
    from training.bundle.store import BundleStore
    from training.distill.query_eligibility import live_reference

    with timer.phase("read the live bundle's vectors"):
        return live_reference(BundleStore(bundles_dir), data_dir, config.eval_split)


def _write_timings(timer: PhaseTimer, run_dir: Path) -> None:
    timer.write(run_dir)
    logger.info(
        "pipeline phases (wall s): %s", ", ".join(f"{n} {sec:.1f}" for n, sec in timer.seconds.items())
    )
