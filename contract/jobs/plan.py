"""One typed plan for a retrain or a publish: every option of the job, grouped by concern, its defaults
resolved once, validated once, passed whole from the job (training/jobs/tasks.py) or the CLI
(training/cli/) through run_pipeline → index_model → build_bundle → BundleStore, and recorded once in the
bundle's manifest (`extras["retrain_plan"]`).

- data:        where the dataset is and which splits evaluate / train (`DataPlan`);
- training:    the full retrain's knobs (contract.config.TrainConfig);
- query side:  the query-side retrain's knobs (contract.query_config.QueryRetrainConfig);
- index:       the index kind, its recall target, its backend (`IndexPlan`);
- publication: the quality gate, the versions kept, the ONNX and distilled query encoders
               (`PublicationPlan`).

A retrain job's options stay one flat object over HTTP (contract/jobs/queue.py: RetrainOptions, the
spec's schema); its `plan()` turns them into the plan, the only place that reads them.

The retrain scope (`retrain_scope`: auto | full | query) says what a retrain trains: both towers (full, the
corpus encoded again), only a query tower against the live bundle's fixed document vectors (query), or
whichever the live bundle allows (auto). It used to be called `tower`, a word the query-side retrain also
uses for its query tower's kind (`query_tower`: lora | full | truncated); `tower` stays accepted as a
deprecated alias. `auto` is resolved once, by the pipeline (it needs the live bundle), and the plan then
carries the scope taken and why (`RetrainPlan.resolved`).

`start_from` (base | live) says which model a full retrain fine-tunes: the base model, or the live bundle's
(training/publish/start_model.py copies it into the run and makes it the run's base model).

`feedback` (include | only | exclude; unset: include when the collection has positive judgments) says whether
the relevance judgments sent to POST /feedback train too (training/feedback/): resolved once, by the job
from the judgment store, and the plan then carries what was taken and why (`feedback_reason`).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.config import TrainConfig
from contract.defaults import GATE_METRIC, GATE_TOLERANCE, KEEP_VERSIONS, TARGET_RECALL
from contract.index.backend import BackendConfig, IndexBackend, IndexKind
from contract.query_config import QueryRetrainConfig

logger = logging.getLogger(__name__)

RetrainScope = Literal["auto", "full", "query"]
FeedbackUse = Literal["include", "only", "exclude"]
StartFrom = Literal["base", "live"]
START_FROM_HELP = (
    "The model a full retrain fine-tunes: base (the base model, or base_model when given) or live (the "
    "collection's live bundle's model: what earlier retrains learned is kept and the new pairs, relevance "
    "judgments above all, are learned on top; the quality gate still decides). Default: base."
)
Variant = Literal["distilled", "static"]
PLAN_KEY = "retrain_plan"  # manifest.extras: the plan a bundle was built by (its record(), no secrets)
# manifest.extras, manifest.metrics and the job record: what the relevance judgments did in a retrain
FEEDBACK_KEY = "feedback"
# a retrain job lets the live bundle decide (a query-side retrain when it can: 0.26 of a full retrain's
# time at 15k documents, bench/training/retrain_scale.py); `train` / `pipeline` on the command line train both
# towers unless asked, as they did before the query side existed
JOB_SCOPE: RetrainScope = "auto"
CLI_SCOPE: RetrainScope = "full"
# the static query tower: ~0.06 ms a query against ONNX int8's ~1.5 ms, at the cost the phase table prints
DEFAULT_VARIANTS: tuple[Variant, ...] = ("static",)


class DataPlan(BaseModel):
    """The dataset: its folder, the split that evaluates (and gates) and the one that trains."""

    model_config = ConfigDict(extra="forbid")

    data_dir: str
    eval_split: str = "test"
    train_split: str = "train"


class IndexPlan(BaseModel):
    """How the bundle's index is built and where its vectors live."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    kind: IndexKind = "auto"
    target_recall: float = Field(TARGET_RECALL, gt=0.0, le=1.0)
    memory_budget_bytes: int | None = None
    # where the vectors go: None is FAISS in the bundle; the Milvus connection is the worker's or the CLI's,
    # never recorded (it holds credentials)
    backend: BackendConfig | None = Field(None, exclude=True)

    @property
    def backend_name(self) -> IndexBackend:
        return "faiss" if self.backend is None else self.backend.backend

    @property
    def milvus(self) -> bool:
        return self.backend_name == "milvus"


class PublicationPlan(BaseModel):
    """How a staged bundle becomes a version: the gate, what is kept, what is attached to it."""

    model_config = ConfigDict(extra="forbid")

    bundles_dir: str
    force: bool = False  # live even if the quality gate would keep it as a candidate
    keep: int = Field(KEEP_VERSIONS, ge=1)  # bundle versions kept (the live one always is)
    gate_metric: str = GATE_METRIC
    tolerance: float = Field(GATE_TOLERANCE, ge=0.0)
    onnx: bool = True  # export + quality-check the ONNX query encoders into the bundle
    # the distilled query encoders: True builds them, False does not, None where they can run (a train
    # split, a FAISS index) with a log line where they cannot (the default)
    distill: bool | None = None
    distill_variants: list[Variant] = Field(default_factory=lambda: list(DEFAULT_VARIANTS))

    @property
    def gate(self) -> tuple[str, float, bool]:
        return self.gate_metric, self.tolerance, self.force


class PublishPlan(BaseModel):
    """What publishing a model needs (`index_model`): data, index, publication. A reindex is one."""

    model_config = ConfigDict(extra="forbid")

    data: DataPlan
    index: IndexPlan = Field(default_factory=IndexPlan)
    publication: PublicationPlan

    def record(self) -> dict[str, Any]:
        """The plan as the manifest records it (JSON; the backend's connection left out, and a retrain's
        TrainConfig too: the manifest's `training_config` holds it, once)."""
        return self.model_dump(mode="json", exclude={"training"})


class RetrainPlan(PublishPlan):
    """A retrain: what is retrained (the scope, and why once resolved), how each tower trains, then the
    publish. Its data splits are its TrainConfig's (one value, set by `retrain_plan`)."""

    scope: RetrainScope = JOB_SCOPE
    scope_reason: str = ""  # why this scope: "asked for", or what `auto` saw
    # can the live bundle be the fixed side for this dataset (training/distill/query_eligibility.py)? None:
    # not checked yet; `auto` checks once and the run reads the answer instead of checking again
    live_eligible: bool | None = None
    training: TrainConfig = Field(default_factory=TrainConfig)
    query: QueryRetrainConfig = Field(default_factory=QueryRetrainConfig)
    # the relevance judgments: None until resolved (include when the collection has positive ones)
    feedback: FeedbackUse | None = None
    feedback_reason: str = ""  # "asked for", or what resolving None saw in the judgment store
    # a full retrain's starting model: the base model, or the live bundle's (training/publish/start_model.py)
    start_from: StartFrom = "base"
    start_reason: str = ""  # what it started from, once resolved

    def resolved(self, scope: RetrainScope, why: str, *, live_eligible: bool | None = None) -> RetrainPlan:
        update = {"scope": scope, "scope_reason": why, "live_eligible": live_eligible}
        return self.model_copy(update=update)


def retrain_plan(
    training: TrainConfig,
    query: QueryRetrainConfig,
    publish: PublishPlan,
    scope: RetrainScope,
    feedback: FeedbackUse | None = None,
    start_from: StartFrom = "base",
) -> RetrainPlan:
    """A RetrainPlan from its parts; the data splits follow the TrainConfig's."""
    data = publish.data.model_copy(
        update={"eval_split": training.eval_split, "train_split": training.train_split}
    )
    return RetrainPlan(
        data=data,
        index=publish.index,
        publication=publish.publication,
        scope=scope,
        training=training,
        query=query,
        feedback=feedback,
        start_from=start_from,
    )


def scope_of(
    retrain_scope: RetrainScope | None, tower: RetrainScope | None, default: RetrainScope
) -> RetrainScope:
    """The scope asked for: `retrain_scope`, else the deprecated `tower` (logged), else `default`."""
    if tower is not None:
        logger.warning("the `tower` option is deprecated: it is `retrain_scope` now (tower=%s taken)", tower)
        if retrain_scope is None:
            return tower
    return default if retrain_scope is None else retrain_scope
