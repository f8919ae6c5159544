"""A retrain's use of the relevance judgments: `feedback` resolved, the training split extended, and the
held-out slice scored by the candidate and by the live model (training/publish/pipeline.py runs these).

Resolved once: `exclude` reads nothing; `include` and `only` read the judgment store; unset is `include`
when the collection has positive judgments, else `exclude`, and the plan records which and why. The held-out
slice's nDCG@10 of both models goes to the manifest (`metrics["feedback"]`, `extras["feedback"]`), where the
quality gate compares them (training/bundle/store.py) and the bundle card and the job record show them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.defaults import FEEDBACK_HOLDOUT
from contract.errors import JobOptionsInvalid
from contract.jobs.plan import FEEDBACK_KEY, RetrainPlan
from training.feedback.pairs import FeedbackSlices, heldout_split, read_slices, with_feedback
from training.train.run_hooks import RunHooks

if TYPE_CHECKING:
    from training.train.phases import LiveReference
    from training.train.trainer import TrainResult

logger = logging.getLogger(__name__)

__all__ = ["FEEDBACK_KEY", "feedback_record", "heldout_metrics", "resolve_feedback"]


def resolve_feedback(plan: RetrainPlan, hooks: RunHooks) -> tuple[RetrainPlan, FeedbackSlices | None]:
    """The plan with `feedback` resolved and why; the slices when judgments train. The run's training split
    (hooks.split) then holds the feedback training slice."""
    asked = plan.feedback
    if asked == "exclude":
        return _resolved(plan, "exclude", "asked for (feedback exclude)"), None
    data = plan.data
    seed = plan.training.seed
    train = hooks.split(data.data_dir, data.train_split, seed=seed)
    slices = read_slices(plan.publication.bundles_dir, train.corpus, seed=seed, holdout=FEEDBACK_HOLDOUT)
    if not slices.train_queries and not slices.heldout_queries:
        if asked == "only":
            raise JobOptionsInvalid(
                "feedback", "only, but the collection has no positive judgment to train on"
            )
        if asked is None:
            return _resolved(plan, "exclude", "the collection has no positive judgments"), None
        return _resolved(plan, "include", "asked for (feedback include); no positive judgments yet"), None
    use = asked or "include"
    why = (
        f"asked for (feedback {asked})"
        if asked
        else f"{slices.n_judgments} positive judgments in the collection"
    )
    hooks.preload(data.data_dir, data.train_split, with_feedback(train, slices, use), seed=seed)
    return _resolved(plan, use, why), slices


def _resolved(plan: RetrainPlan, use: str, why: str) -> RetrainPlan:
    logger.info("feedback %s (%s)", use, why)
    return plan.model_copy(update={"feedback": use, "feedback_reason": why})


def feedback_record(
    plan: RetrainPlan, slices: FeedbackSlices | None, heldout: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What the judgments did in this run, as the manifest and the job record keep it."""
    record: dict[str, Any] = {"use": plan.feedback, "reason": plan.feedback_reason}
    if slices is not None:
        record |= slices.summary()
    if heldout is not None:
        record["heldout"] = heldout
    return record


def heldout_metrics(
    plan: RetrainPlan,
    slices: FeedbackSlices | None,
    trained: TrainResult,
    hooks: RunHooks,
    reference: LiveReference | None = None,
) -> tuple[dict[str, float], dict[str, Any]] | None:
    """(the candidate's metrics on the held-out judged queries, {candidate and live nDCG@10, the live
    version, queries}); None without held-out queries. Both models rank the same corpus exactly."""
    if slices is None or not slices.heldout_queries:
        return None
    from contract.encoding.encoder import Encoder
    from training.bundle.store import BundleStore
    from training.eval.evaluate import evaluate

    evaluation = hooks.split(plan.data.data_dir, plan.data.eval_split)
    data = heldout_split(evaluation, slices)
    same_corpus = list(data.corpus)
    tuned = trained.evaluation
    docs = tuned.doc_embeddings if tuned is not None and tuned.doc_ids == same_corpus else None
    candidate = evaluate(
        Encoder.load(trained.model_dir), data, doc_embeddings=docs, show_progress=False, cache=hooks.cache
    )
    out: dict[str, Any] = {
        "queries": len(data.queries),
        "candidate_ndcg@10": candidate.metrics["ndcg@10"],
        "live_ndcg@10": None,
        "live_version": None,
    }
    version = BundleStore(plan.publication.bundles_dir).current_version()
    if version is not None:
        if reference is not None and reference.version == version and reference.doc_ids == same_corpus:
            live = evaluate(
                reference.encoder, data, doc_embeddings=reference.doc_embeddings, show_progress=False
            )
        else:
            model = Path(plan.publication.bundles_dir) / version / "model"
            live = evaluate(Encoder.load(model), data, show_progress=False, cache=hooks.cache)
        out |= {"live_ndcg@10": live.metrics["ndcg@10"], "live_version": version}
    logger.info(
        "held-out feedback (%d queries): nDCG@10 candidate %.4f, live %s",
        out["queries"],
        out["candidate_ndcg@10"],
        "none" if out["live_ndcg@10"] is None else f"{out['live_ndcg@10']:.4f}",
    )
    return dict(candidate.metrics), out
