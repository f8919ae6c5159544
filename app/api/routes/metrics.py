"""GET /metrics in the Prometheus text format."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.deps import MetricsDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(m: MetricsDep) -> Response:
    """Requests by route and status, request / encode / index-search latency histograms, micro-batch sizes,
    queue depth, the live bundle (`search_bundle_info{version, encoder_backend, metric}`), vectors, index
    recall@10, gate decisions by outcome, jobs by type and state, and the process (resident memory, CPU),
    platform and GC collectors."""
    # off the event loop: the job and gate series read files (the job store, gate.jsonl)
    return Response(await asyncio.to_thread(generate_latest, m.registry), media_type=CONTENT_TYPE_LATEST)
