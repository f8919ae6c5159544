"""The FastAPI application factory. Nothing is loaded at import time.

Run it with `uvicorn --factory app.main:create_app` (settings from `SEARCH_*` variables), or in
tests with `with TestClient(create_app(Settings(...))) as client:` (the context manager runs the
lifespan, which loads the bundle CURRENT names).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, TypedDict

from fastapi import FastAPI

from app.api import collection_scope
from app.api.middleware import EdgeMiddleware
from app.api.openapi import install_openapi
from app.api.openapi_ids import operation_id
from app.api.routes import (
    bundles,
    collections,
    docs,
    documents,
    embed,
    feedback,
    gap,
    health,
    jobs,
    metrics,
    search,
    ui,
)
from app.api.search_fast_path import SearchFastPath
from app.engine.batching import DirectRunner, Inference, MicroBatcher
from app.errors import install_error_handlers
from app.live.bundle_listing import read_gate_log
from app.live.collections import CollectionRegistry
from app.live.hot_swap import HotSwap
from app.metrics import AppMetrics
from app.settings import Settings
from contract.bundles.collections import DEFAULT_COLLECTION
from contract.jobs.queue import JobQueue
from contract.log_setup import configure_logging

logger = logging.getLogger(__name__)

DESCRIPTION = """Embedding similarity search over a versioned bundle (fine-tuned encoder + FAISS index +
documents + generalization-gap report). Errors always have the body
`{"error": {"code": "...", "message": "..."}}`."""


class State(TypedDict):
    settings: Settings  # a /collections/{c}/ request sees its collection's (app/api/collection_scope.py)
    hot_swap: HotSwap  # the default collection's; a /collections/{c}/ request sees its collection's
    runner: MicroBatcher | DirectRunner  # one inference thread for every collection
    metrics: AppMetrics
    job_queue: JobQueue
    collections: CollectionRegistry
    collection: str | None  # set on /collections/{c}/ requests only


def _runner(settings: Settings, inference: Inference, metrics: AppMetrics) -> MicroBatcher | DirectRunner:
    """How searches reach the inference thread: micro-batched, or one request per call."""
    if settings.microbatch_enabled:
        return MicroBatcher(
            inference,
            max_size=settings.microbatch_max_size,
            max_wait_s=settings.microbatch_max_wait_ms / 1000,
            queue_max=settings.queue_max,
            metrics=metrics,
            slice_tokens=settings.fair_slice_tokens,
            slice_queries=settings.fair_slice_queries,
        )
    return DirectRunner(
        inference,
        queue_max=settings.queue_max,
        metrics=metrics,
        slice_tokens=settings.fair_slice_tokens,
        slice_queries=settings.fair_slice_queries,
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)  # root WARNING, ours at log_level
    app_metrics = AppMetrics.for_app()  # each collection's own series are labelled into it
    app = FastAPI(
        title="infonce-search",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=partial(_lifespan, settings=settings, app_metrics=app_metrics),
        docs_url=None,  # app/api/routes/docs.py serves /docs and /redoc without a CDN, under the page's CSP
        redoc_url=None,
        generate_unique_id_function=operation_id,  # `search`, `delete_document`: app/api/openapi_ids.py
    )
    install_error_handlers(app)
    install_openapi(app, settings)
    scoped = _include_routes(app)
    # POST /search without FastAPI's routing and dependency solving (app/api/search_fast_path.py); added
    # first, so it sits inside the edge layer below
    app.add_middleware(SearchFastPath, owner=app)
    # HEAD as GET, request metrics and the body limit, in one layer (app/api/middleware.py)
    app.add_middleware(
        EdgeMiddleware,
        max_bytes=settings.max_body_bytes,
        metrics=app_metrics,
        label_of=partial(_collection_label, scoped),
    )
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI, *, settings: Settings, app_metrics: AppMetrics) -> AsyncIterator[State]:
    """Load the live bundle(s), start the search runner, open the job store; all of it undone at shutdown."""
    inference = Inference()
    registry = CollectionRegistry(settings, app_metrics)
    runner = _runner(settings, inference, app_metrics)
    # the job store the worker reads (the same SEARCH_QUEUE_URL; contract.jobs.queue's defaults)
    assert settings.queue_url is not None  # Settings fills in the default
    job_queue = JobQueue(settings.queue_url, heartbeat_timeout_s=settings.job_heartbeat_timeout_s)
    await runner.start()
    hot_swap = (await registry.start()).hot_swap  # `default`, loaded as before collections
    # series read at scrape time: gate decisions from the bundles folder, jobs from the job store
    app_metrics.records.gate_log = partial(read_gate_log, hot_swap.folder.root)
    app_metrics.records.job_counts = partial(jobs.job_counts, job_queue)
    # also on app.state, for operators' scripts and tests that need to look inside
    app.state.hot_swap, app.state.runner, app.state.inference = hot_swap, runner, inference
    app.state.job_queue, app.state.collections = job_queue, registry
    state: State = {
        "settings": settings,
        "hot_swap": hot_swap,
        "runner": runner,
        "metrics": app_metrics,
        "job_queue": job_queue,
        "collections": registry,
        "collection": None,
    }
    try:
        yield state
    finally:
        await registry.stop()
        await runner.stop()
        inference.shutdown()
        job_queue.close()


def _include_routes(app: FastAPI) -> set[str]:
    """Every router, then the ones that serve one collection again under /collections/{collection}/;
    returns the scoped route templates (the metrics label them with their collection)."""
    for module in (search, documents, feedback, gap, health, bundles, metrics):
        app.include_router(module.router)
    app.include_router(embed.router)  # POST /embed, POST /v1/embeddings: vectors in the index's space
    app.include_router(jobs.router)  # POST /jobs …: records and enqueues; a worker process runs them
    app.include_router(ui.router)  # the web page at / and the report's plots
    app.include_router(docs.router)  # GET /docs, GET /redoc and their files
    app.include_router(collections.router)  # /collections, /aliases
    return collection_scope.mount(
        app,
        (
            search.router,
            embed.router,
            documents.router,
            feedback.router,
            gap.router,
            bundles.router,
            jobs.router,
            health.router,
            ui.router,
        ),
        skip=("/healthz", "/", "/ui/assets/{name}"),
    )


def _collection_label(scoped: set[str], scope: Any, template: str) -> str:
    """The `collection` label of one request: the collection it named (bounded, app/live/collections.py),
    `default` on the routes of old that serve it, empty on routes about no collection."""
    state = scope.get("state") or {}
    name, registry = state.get("collection"), state.get("collections")
    if name is None:
        return DEFAULT_COLLECTION if template in scoped else ""
    return registry.label(name) if registry is not None else name
