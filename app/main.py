"""The FastAPI application factory. Nothing is loaded at import time.

Run it with `uvicorn --factory app.main:create_app` (settings from `SEARCH_*` variables), or in
tests with `with TestClient(create_app(Settings(...))) as client:` (the context manager runs the
lifespan, which loads the bundle CURRENT names).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TypedDict

from fastapi import FastAPI

from app.batching import DirectRunner, Inference, MicroBatcher
from app.errors import install_error_handlers
from app.metrics import AppMetrics, MetricsMiddleware
from app.middleware import BodyLimitMiddleware
from app.openapi import install_openapi
from app.routes import bundles, documents, gap, health, jobs, metrics, search
from app.settings import Settings
from app.store import BundleHolder

logger = logging.getLogger(__name__)

DESCRIPTION = """Embedding similarity search over a versioned bundle (fine-tuned encoder + FAISS index +
documents + generalization-gap report). Errors always have the body
`{"error": {"code": "...", "message": "..."}}`."""


class State(TypedDict):
    settings: Settings
    holder: BundleHolder
    runner: MicroBatcher | DirectRunner
    metrics: AppMetrics


def _configure_logging(level: str) -> None:
    root = logging.getLogger()
    if not root.handlers:  # uvicorn / pytest may have configured logging already
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("app").setLevel(level.upper())
    logging.getLogger("training").setLevel(level.upper())


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    _configure_logging(settings.log_level)
    app_metrics = AppMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        inference = Inference()
        holder = BundleHolder(settings, app_metrics)
        runner: MicroBatcher | DirectRunner
        if settings.microbatch_enabled:
            runner = MicroBatcher(
                inference,
                max_size=settings.microbatch_max_size,
                max_wait_s=settings.microbatch_max_wait_ms / 1000,
                queue_max=settings.queue_max,
                metrics=app_metrics,
                slice_tokens=settings.fair_slice_tokens,
            )
        else:
            runner = DirectRunner(
                inference,
                queue_max=settings.queue_max,
                metrics=app_metrics,
                slice_tokens=settings.fair_slice_tokens,
            )
        await runner.start()
        await holder.start()
        # also on app.state, for operators' scripts and tests that need to look inside
        app.state.holder, app.state.runner, app.state.inference = holder, runner, inference
        try:
            yield {"settings": settings, "holder": holder, "runner": runner, "metrics": app_metrics}
        finally:
            await holder.stop()
            await runner.stop()
            inference.shutdown()

    app = FastAPI(
        title="infonce-search",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    install_error_handlers(app)
    install_openapi(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=app_metrics)
    for module in (search, documents, gap, health, bundles, metrics):
        app.include_router(module.router)
    app.include_router(jobs.router)  # POST /jobs …: records and enqueues; a worker process runs them
    return app
