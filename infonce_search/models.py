"""The API's answers as pydantic models, written once here (the client imports nothing of the server).

Each model is named after the server's OpenAPI component it reads (`SearchResponse`, `Hit`, …);
tests/app/client/test_client_models.py checks every one against the live server's spec (same fields, same
required ones) and validates real answers, so a server change that the client misses fails a test.
Unknown fields are kept (`extra="allow"`): a newer server's additions reach the caller instead of
breaking an older client. `model.model_dump()` gives the plain JSON back.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["dense", "lexical", "hybrid"]
Metric = Literal["cosine", "aninfonce"]
ScoreKind = Literal["cosine", "aninfonce", "bm25", "rrf", "convex"]
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


# -- search and vectors --------------------------------------------------------------------------------
class Hit(Model):
    id: str
    score: float = Field(description="dense: the learned similarity; lexical: BM25; hybrid: the fused score.")
    title: str | None = None
    text: str | None = None
    metadata: dict[str, Any] | None = None


class QueryResult(Model):
    hits: list[Hit]
    search_id: str | None = Field(
        None,
        description="Signed id of this ranking: send it with a judgment (feedback) to tie it to what was shown.",
    )


class Timings(Model):
    encode_ms: float
    search_ms: float
    total_ms: float


class SearchResponse(Model):
    version: str
    metric: Metric
    results: list[QueryResult] = Field(description="One entry per query, in request order.")
    timings: Timings
    mode: Mode = "dense"
    # what the scores are: the model's metric (dense), bm25 (lexical), rrf or convex (hybrid's fusion);
    # None from a server older than the field
    score_kind: ScoreKind | None = None

    @property
    def hits(self) -> list[Hit]:
        """The first (or only) query's hits."""
        return self.results[0].hits


class EmbedResponse(Model):
    version: str
    metric: Metric
    kind: Literal["query", "document"]
    encoder: str
    dim: int
    embeddings: list[list[float]]
    encode_ms: float


class OpenAIEmbedding(Model):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="The vector, or its base64 float32 bytes.")


class OpenAIUsage(Model):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(Model):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage


class OpenAIModel(Model):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "infonce-search"


class OpenAIModelList(Model):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]


class GapResponse(Model):
    version: str
    model: dict[str, Any]
    report: dict[str, Any] = Field(
        description="The generalization-gap report (its own versioned schema, `schema_version`; see /docs)."
    )
    live: dict[str, Any] | None = Field(
        None, description="The InfoNCE risk on the judgments sent with feedback(), against the prediction."
    )


class CollectionReadiness(Model):
    status: Literal["ready", "not_ready", "unloaded", "empty"]
    version: str | None = None
    reason: str | None = None


class ReadyWithCollections(Model):
    status: Literal["ready"]
    version: str
    n_vectors: int
    canary_hits: int
    collections: dict[str, CollectionReadiness] = Field(default_factory=dict)


# -- bundles -------------------------------------------------------------------------------------------
class BundleEntry(Model):
    version: str
    live: bool
    current: bool
    created_at: str
    metrics: dict[str, dict[str, float]]
    gate: dict[str, Any] | None = None
    retrieval: dict[str, Any] | None = None
    mutation_seq: int = 0


class LoadFailure(Model):
    version: str
    error: str
    at: str


class Unreadable(Model):
    version: str
    error: str


class BundlesResponse(Model):
    live: str | None
    current: str | None
    encoder_backend: str | None = None
    encoder_choice: dict[str, Any] | None = None
    serving: dict[str, Any] | None = None
    versions: list[BundleEntry]
    gate_decisions: list[dict[str, Any]] = Field(default_factory=list)
    gate_total: int = 0
    last_failed_load: LoadFailure | None = None
    fallback_from: str | None = None
    unreadable: list[Unreadable] = Field(default_factory=list)
    mutations: dict[str, Any] | None = None


class ActivateResponse(Model):
    version: str
    previous: str | None
    encoder_backend: str


# -- documents -----------------------------------------------------------------------------------------
class FeedbackResponse(Model):
    stored: int = Field(description="Judgments stored (all of the batch).")
    first_seq: int
    last_seq: int
    total: int = Field(description="Judgments the collection keeps now.")


class MutationResponse(Model):
    applied: int = Field(description="Documents written (upserts) or deleted (deletes; not_found excluded).")
    first_seq: int
    seq: int
    version: str
    live_seq: int
    not_found: list[str] | None = Field(None, description="Deletes only: ids that did not exist.")


class DocumentOut(Model):
    id: str
    title: str
    text: str
    metadata: dict[str, Any]
    seq: int | None
    version: str


# -- jobs ----------------------------------------------------------------------------------------------
class Progress(Model):
    phase: str = "queued"
    step: int = 0
    total_steps: int | None = None
    fraction: float | None = None  # of the current phase, 0 to 1; None when it is not counted
    phase_started_at: float | None = None
    epoch: int | None = None
    loss: float | None = None
    temperature: float | None = None
    eta_s: float | None = None  # seconds left in the current phase at its rate so far
    budget_s: float | None = Field(
        None, description="The retrain's time budget (time_budget_s), beside eta_s."
    )


class JobSummary(Model):
    """What anyone may read about a job; the detail fields (below) come with the API key."""

    id: str
    type: Literal["retrain", "reindex"]
    collection: str = "default"
    state: JobState
    progress: Progress
    cancel_requested: bool
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None  # start to finish, or so far while running


class JobDetail(JobSummary):
    dataset: str
    options: dict[str, Any]
    data_dir: str
    log_tail: list[str]
    bundle_version: str | None = None
    live: bool | None = None
    gate_reason: str | None = None
    retrain_scope: str | None = None  # what a retrain trained: full or query
    tower: str | None = None  # retrain_scope's deprecated name (the same value)
    scope_reason: str | None = None  # why a retrain trained that scope
    # a retrain's relevance judgments: use and reason, pairs, `heldout` nDCG@10 of candidate and live
    feedback: dict[str, Any] | None = None
    reason: str | None = None  # why it was submitted when no person did (SEARCH_RETRAIN_ON_DRIFT)
    error: str | None = None
    worker: str | None = None
    heartbeat_at: float | None = None


class WorkerBeat(Model):
    id: str
    started_at: float
    heartbeat_at: float
    alive: bool | None = None


class JobList(Model):
    jobs: list[JobDetail | JobSummary]
    workers: list[WorkerBeat] = Field(default_factory=list)


__all__ = [
    "ActivateResponse",
    "BundleEntry",
    "BundlesResponse",
    "CollectionReadiness",
    "DocumentOut",
    "EmbedResponse",
    "FeedbackResponse",
    "GapResponse",
    "Hit",
    "JobDetail",
    "JobList",
    "JobSummary",
    "LoadFailure",
    "MutationResponse",
    "OpenAIEmbedding",
    "OpenAIEmbeddingResponse",
    "OpenAIModel",
    "OpenAIModelList",
    "OpenAIUsage",
    "Progress",
    "QueryResult",
    "ReadyWithCollections",
    "SearchResponse",
    "Timings",
    "Unreadable",
    "WorkerBeat",
]
