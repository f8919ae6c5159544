"""The main job: train → report → index → publish through the quality gate.

`python -m training pipeline` (the README's demo) and the retrain job both run this. Each stage writes
its own artifacts (the run folder of `train`, then a bundle staged beside the published versions), so a
crash at any point leaves at most an unpublished folder behind — never a half-written live bundle.

The plan's `retrain_scope` (contract/jobs/plan.py) chooses what is retrained: `full` (both towers: train,
encode the corpus, index), `query` (only a query tower against the live bundle's fixed document vectors
and index: training/distill/query_retrain.py, no corpus encode) or `auto` (query when the live bundle can serve as
the fixed side for this dataset, training.distill.query_eligibility.query_side_blocker, else full),
resolved once (`resolve_scope`) and carried by the plan into the manifest.

The plan's `feedback` (include | only | exclude, unset: include when there are judgments) is resolved first
(training/feedback/use.py): the relevance judgments of the collection join the training split, a held-out
slice of them is scored by the candidate and the live model, and both go to the manifest, where the gate
reads them. A retrain that trains on judgments is a full one when `auto` would have taken the query side:
the query side does not score the held-out slice, so its gate could not see it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.config import TrainConfig
from contract.jobs.plan import RetrainPlan
from training.bundle.store import PublishResult
from training.eval.embedding_cache import EmbeddingCache
from training.export.corpus_encoder import corpus_encoder_for
from training.feedback.pairs import FeedbackSlices
from training.feedback.use import FEEDBACK_KEY, feedback_record, heldout_metrics, resolve_feedback
from training.publish.index_model import index_model
from training.publish.start_model import resolve_start
from training.train.phase_timer import PhaseTimer, phase
from training.train.phases import LiveReference
from training.train.run_hooks import RunHooks
from training.train.trainer import TrainResult, train

logger = logging.getLogger(__name__)

CACHE_SUBDIR = "embeddings"


@dataclass
class PipelineResult:
    run_dir: Path
    train: TrainResult
    publish: PublishResult
    seconds: float
    timer: PhaseTimer  # wall time per phase; also in <run_dir>/timings.json
    plan: RetrainPlan  # as run: its scope resolved (full, or query: a query-side retrain) and why
    feedback: dict[str, Any] | None = None  # what the judgments did (training/feedback/use.py)

    @property
    def scope(self) -> str:
        return self.plan.scope


def default_run_dir(work_dir: str | Path) -> Path:
    """A fresh, time-sorted run folder under `work_dir`."""
    return Path(work_dir) / datetime.now(UTC).strftime("run-%Y%m%dT%H%M%SZ")


def run_pipeline(plan: RetrainPlan, work_dir: str | Path, hooks: RunHooks | None = None) -> PipelineResult:
    """Fine-tune on the plan's data, write the gap report, build the index and publish the bundle: live
    only if the quality gate accepts it (or the plan's `force`); `publish.reason` says why.

    `hooks.on_progress` sees every training step (and may raise to stop); `hooks.checkpoint` is called
    between the later phases and during document encoding, and cancels by raising (see `index_model`).
    Phase wall times go to `<run_dir>/timings.json`; corpus embeddings are cached in `hooks.cache`
    (default `<work_dir>/embeddings`), so a later run on the same corpus skips the base model's encode.
    """
    started = time.perf_counter()
    # publishes / distills: what a time budget reserves time for after training (training/train/budget.py)
    distills = plan.publication.distill is not False
    hooks = replace(hooks or RunHooks(), timer=PhaseTimer(), publishes=True, distills=distills)
    if hooks.cache is None:
        hooks.cache = EmbeddingCache(Path(work_dir) / CACHE_SUBDIR)
    run_dir = default_run_dir(work_dir)
    plan, slices = resolve_feedback(plan, hooks)
    plan = resolve_start(plan, work_dir)  # before the scope: starting from live makes it full
    plan = resolve_scope(plan, hooks, slices)
    if plan.scope == "query":
        if plan.training.time_budget_s is not None:  # its steps are few and its cost has no corpus encode
            logger.info("time_budget_s applies to a full retrain: the query-side retrain runs its own steps")
        done = _query_side(plan, run_dir, hooks, started)
        done.feedback = feedback_record(plan, slices)  # trained on, not scored: see the module docstring
        return done
    reference = _live_reference(plan, hooks)
    trained = _train_phase(plan.training, plan.data.data_dir, run_dir, hooks, reference)
    hooks.stop()
    scored = heldout_metrics(plan, slices, trained, hooks, reference)
    record = feedback_record(plan, slices, None if scored is None else scored[1])
    metrics = {} if scored is None else {FEEDBACK_KEY: scored[0]}
    logger.info("pipeline: indexing %s into %s", plan.data.data_dir, plan.publication.bundles_dir)
    published = index_model(
        run_dir, plan, hooks, evaluation=trained.evaluation, metrics=metrics, extras={FEEDBACK_KEY: record}
    )
    done = _finish(run_dir, trained, published, started, hooks, plan)
    done.feedback = record
    return done


def _finish(
    run_dir: Path,
    trained: TrainResult,
    published: PublishResult,
    started: float,
    hooks: RunHooks,
    plan: RetrainPlan,
) -> PipelineResult:
    assert hooks.timer is not None  # run_pipeline gives every run its own
    _write_timings(hooks.timer, run_dir)
    return PipelineResult(run_dir, trained, published, time.perf_counter() - started, hooks.timer, plan)


def resolve_scope(
    plan: RetrainPlan, hooks: RunHooks | None = None, feedback: FeedbackSlices | None = None
) -> RetrainPlan:
    """The plan with its scope resolved once, and why: `auto` takes the query side when the live bundle can
    be its fixed side and its documents were encoded by a fine-tuned model, and no held-out judged queries
    must gate it (`feedback`); full and query as asked."""
    if plan.scope != "auto":
        return plan.resolved(plan.scope, f"asked for (retrain_scope {plan.scope})")
    from training.bundle.store import BundleStore
    from training.distill.query_eligibility import documents_never_adapted, query_side_blocker

    if plan.index.milvus:
        return plan.resolved("full", "the index backend is milvus")
    if plan.start_from == "live":
        return plan.resolved("full", f"start_from live ({plan.start_reason}): the whole model is fine-tuned")
    if plan.training.base_model is not None:
        why = f"a base model was given ({plan.training.base_model}): the document tower changes"
        return plan.resolved("full", why)
    store = BundleStore(plan.publication.bundles_dir)
    evaluation = (hooks or RunHooks()).split(plan.data.data_dir, plan.data.eval_split)
    blocker = query_side_blocker(store, plan.data.data_dir, plan.data.eval_split, data=evaluation)
    if blocker is not None:
        logger.info("retrain_scope auto: full retrain (%s)", blocker)
        return plan.resolved("full", blocker, live_eligible=False)
    base_documents = documents_never_adapted(store)
    if base_documents is not None:  # the live vectors still spare the full retrain its base-model encode
        logger.info("retrain_scope auto: full retrain (%s)", base_documents)
        return plan.resolved("full", base_documents, live_eligible=True)
    if feedback is not None and feedback.heldout_queries:
        why = "judged queries are held out to gate on, and only a full retrain scores them"
        logger.info("retrain_scope auto: full retrain (%s)", why)
        return plan.resolved("full", why, live_eligible=True)
    logger.info("retrain_scope auto: query-side retrain (the live bundle holds this dataset's documents)")
    why = "the live bundle holds this dataset's documents unchanged"
    return plan.resolved("query", why, live_eligible=True)


def _query_side(plan: RetrainPlan, run_dir: Path, hooks: RunHooks, started: float) -> PipelineResult:
    """The query-side retrain (training/distill/query_retrain.py), as a PipelineResult."""
    from training.distill.query_retrain import query_side_retrain

    done = query_side_retrain(plan, run_dir, hooks)
    assert done.publish is not None  # published: the pipeline always publishes
    version_dir = Path(plan.publication.bundles_dir) / done.publish.version
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
    return _finish(run_dir, trained, done.publish, started, hooks, plan)


def _train_phase(
    config: TrainConfig,
    data_dir: str | Path,
    run_dir: Path,
    hooks: RunHooks,
    reference: LiveReference | None = None,
) -> TrainResult:
    logger.info("pipeline: training into %s", run_dir)
    return train(
        config,
        data_dir,
        run_dir,
        hooks=hooks,
        reference=reference,
        corpus_encoder=corpus_encoder_for,  # torch or ONNX for the one corpus encode, measured here
    )


def _live_reference(plan: RetrainPlan, hooks: RunHooks) -> LiveReference | None:
    """A full retrain over the live bundle's documents starts from its vectors: one corpus encode, not two."""
    if plan.index.milvus or plan.live_eligible is False:  # `auto` found it cannot: no second check
        return None
    from training.bundle.store import BundleStore
    from training.distill.query_eligibility import live_reference

    with phase(hooks.timer, "read the live bundle's vectors"):
        store = BundleStore(plan.publication.bundles_dir)
        evaluation = hooks.split(plan.data.data_dir, plan.data.eval_split)
        return live_reference(store, plan.data.data_dir, plan.data.eval_split, data=evaluation)


def _write_timings(timer: PhaseTimer, run_dir: Path) -> None:
    timer.write(run_dir)
    logger.info(
        "pipeline phases (wall s): %s", ", ".join(f"{n} {sec:.1f}" for n, sec in timer.seconds.items())
    )
