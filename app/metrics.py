"""Prometheus metrics of one app instance (its own registry, so several apps in one process do not clash)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class AppMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "search_http_requests",
            "HTTP requests by route template and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "search_http_request_seconds",
            "Request latency by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_queries = Histogram(
            "search_batch_queries",
            "Queries per encoder/FAISS call (micro-batch size).",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.queue_depth = Gauge(
            "search_queue_depth", "Searches waiting for the inference thread.", registry=r
        )
        self.bundle = Info("search_bundle", "The live bundle.", registry=r)
        self.bundle_version = Gauge(
            "search_bundle_live",
            "1 for the live bundle version (label), absent otherwise.",
            ["version"],
            registry=r,
        )
        self.n_vectors = Gauge("search_index_vectors", "Vectors in the live index.", registry=r)
        self.index_recall = Gauge(
            "search_index_recall_at_10",
            "Recall@10 of the live index vs exact search, measured when it was built (1 for an exact index).",
            registry=r,
        )
        self.cache_hits = Counter(
            "search_query_cache_hits", "Query texts whose embedding came from the cache.", registry=r
        )
        self.cache_misses = Counter(
            "search_query_cache_misses", "Query texts the encoder had to embed (cache on).", registry=r
        )
        self.reloads = Counter("search_bundle_loads", "Bundle loads by outcome.", ["outcome"], registry=r)
        self.fallback = Gauge(
            "search_bundle_fallback",
            "1 while serving an older version because the one CURRENT names failed to load at startup.",
            registry=r,
        )

    def set_live(
        self, version: str, *, n_vectors: int, recall: float | None, backend: str, metric: str
    ) -> None:
        self.bundle_version.clear()
        self.bundle_version.labels(version=version).set(1)
        self.bundle.info({"version": version, "encoder_backend": backend, "metric": metric})
        self.n_vectors.set(n_vectors)
        self.index_recall.set(1.0 if recall is None else recall)


class MetricsMiddleware:
    """Counts requests by *route template* (not raw path, so /bundles/{version} stays one series)."""

    def __init__(self, app: ASGIApp, metrics: AppMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(route=template, method=scope["method"], status=str(status)).inc()
            self.metrics.latency.labels(route=template).observe(time.perf_counter() - started)
