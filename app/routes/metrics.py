"""GET /metrics in the Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.deps import MetricsDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(m: MetricsDep) -> Response:
    """Requests by route and status, latency histograms, micro-batch sizes, queue depth, the live bundle
    version (`search_bundle_info` / `search_bundle_live{version=…}`), vectors and index recall@10."""
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)
