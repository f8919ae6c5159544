"""Prometheus metrics of one app instance (its own registry, so several apps in one process do not clash)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    Metric,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from contract.defaults import DEFAULT_COLLECTION

logger = logging.getLogger(__name__)
LATENCY_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


ENCODE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
# prometheus-client's `_created` series (one per counter/histogram child) double the exposition for no use
# here; process-wide, so every registry of this process drops them
disable_created_metrics()

JobCounts = Callable[[], Iterable[tuple[str, str, int]]]  # (type, state, jobs)
GateLog = Callable[[], list[dict[str, Any]]]


LIVE_VERDICTS = ("consistent", "worse than predicted", "better than predicted", "not enough judgments yet")


class AppMetrics:
    """Prometheus naming: `_total` counters, `_seconds` durations, `_ratio` for recall, one `_info`.

    `AppMetrics()` holds every series in one registry (one bundles folder served alone, as in tests).
    With collections (app/live/collections.py) the app's instance is `AppMetrics.for_app()` (process,
    HTTP, inference and record series, requests by collection, plus every loaded collection's own series)
    and each collection has an `AppMetrics.for_collection()` of its own: the series of one served bundles
    folder (live bundle, loads, query cache, document mutations), in a registry of its own, which the
    app's registry re-exports with a `collection` label while that collection is loaded; so that label
    takes at most as many values as collections are loaded at once (SEARCH_MAX_LOADED_COLLECTIONS).
    """

    def __init__(self, *, app: bool = True, bundle: bool = True) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.collections: CollectionSeries | None = None
        self.collection_requests: Counter | None = None
        if app:
            # resident memory, CPU, open files (an index server's memory is what runs out first); Python's GC
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
            self._request_metrics(r)
            self._work_metrics(r)
            self.records = _RecordsCollector()
            r.register(self.records)
        if bundle:
            self._bundle_metrics(r)
        else:
            self.collections = CollectionSeries()
            r.register(self.collections)
            self._collection_request_metrics(r)

    @classmethod
    def for_app(cls) -> AppMetrics:
        """The app's series; the collections' own come through `collections` (app/live/collections.py)."""
        return cls(app=True, bundle=False)

    @classmethod
    def for_collection(cls) -> AppMetrics:
        """One collection's series, in a registry of its own (labelled when the app re-exports them)."""
        return cls(app=False, bundle=True)

    def _request_metrics(self, r: CollectorRegistry) -> None:
        """HTTP traffic: requests and latency by route template."""
        self.requests = Counter(
            "search_http_requests",
            "HTTP requests by route template and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "search_http_request_duration_seconds",
            "Request latency by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def _collection_request_metrics(self, r: CollectorRegistry) -> None:
        """The requests about one collection (its /collections/{c}/ routes, and the routes of old for
        `default`), by collection: its name, or `_other` past SEARCH_METRICS_MAX_COLLECTIONS names."""
        self.collection_requests = Counter(
            "search_collection_requests",
            "Requests about one collection by collection, route template and status (`_other`: names past "
            "SEARCH_METRICS_MAX_COLLECTIONS).",
            ["collection", "route", "status"],
            registry=r,
        )
        self.collection_latency = Histogram(
            "search_collection_request_duration_seconds",
            "Latency of the requests about one collection, by collection.",
            ["collection"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def _work_metrics(self, r: CollectorRegistry) -> None:
        """The inference path: encoder and index time, micro-batch sizes, queue depth."""
        self.encode_seconds = Histogram(
            "search_encode_duration_seconds",
            "Encoder time per micro-batch (or per request with micro-batching off), queries or /embed texts.",
            buckets=ENCODE_BUCKETS,
            registry=r,
        )
        self.index_search_seconds = Histogram(
            "search_index_search_duration_seconds",
            "FAISS search time (plus the filter lookups) per micro-batch, or per request with micro-batching off.",
            buckets=ENCODE_BUCKETS,
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

    def _bundle_metrics(self, r: CollectorRegistry) -> None:
        """What serves: the live bundle, its index, the query cache, loads and fallback."""
        self.bundle = Info(
            "search_bundle", "The live bundle: version, query encoder backend, metric.", registry=r
        )
        self.n_vectors = Gauge("search_index_vectors", "Vectors in the live index.", registry=r)
        self.index_recall = Gauge(
            "search_index_recall_at_10_ratio",
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
        # set when GET /generalization-gap computes its live section (app/live/live_risk.py)
        self.live_risk = Gauge(
            "search_live_risk_nats",
            "InfoNCE risk on the positive judgments of the live version (P1 normalisation, the report's k).",
            registry=r,
        )
        self.live_verdict = Gauge(
            "search_live_verdict",
            "1 for the live section's current verdict against the report's prediction, 0 for the others.",
            ["verdict"],
            registry=r,
        )

    def set_live_risk(self, section: dict[str, Any]) -> None:
        """The gauges of GET /generalization-gap's live section (no risk yet: NaN, and no verdict at 1)."""
        risk = section.get("risk")
        self.live_risk.set(float("nan") if risk is None else risk["value"])
        for verdict in LIVE_VERDICTS:
            self.live_verdict.labels(verdict).set(1.0 if section.get("verdict") == verdict else 0.0)

    def set_live(
        self, version: str, *, n_vectors: int, recall: float | None, encoder_backend: str, metric: str
    ) -> None:
        self.bundle.info({"version": version, "encoder_backend": encoder_backend, "metric": metric})
        self.n_vectors.set(n_vectors)
        self.index_recall.set(1.0 if recall is None else recall)

    def observe_request(
        self, route: str, method: str, status: int, seconds: float, collection: str = ""
    ) -> None:
        """One HTTP request, by *route template* (not raw path, so /bundles/{version} stays one series), and
        with collections by the collection it was about (app/api/middleware.py passes both)."""
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if collection and self.collection_requests is not None:
            self.collection_requests.labels(collection, route, str(status)).inc()
            self.collection_latency.labels(collection).observe(seconds)

    def observe_work(self, encode_ms: float, search_ms: float, *, searched: bool = True) -> None:
        """One encoder + index call (a micro-batch, or one request); /embed-only work searches nothing."""
        self.encode_seconds.observe(encode_ms / 1000)
        if searched:
            self.index_search_seconds.observe(search_ms / 1000)


class _RecordsCollector(Collector):
    """Series read at scrape time from records other processes write: the bundles folder's gate log
    (publishers: CLI, jobs) and the job store (the worker moves jobs between states)."""

    def __init__(self) -> None:
        self.gate_log: GateLog | None = None
        self.job_counts: JobCounts | None = None

    def collect(self) -> Iterator[Metric]:
        if self.gate_log is not None:
            decisions = CounterMetricFamily(
                "search_gate_decisions",
                "Quality-gate decisions on published bundles in the bundles folder's gate log, by outcome "
                "(accepted, forced, rejected = kept as a candidate); the log rotates past 1 MiB (a counter reset).",
                labels=["outcome"],
            )
            counts = {"accepted": 0, "forced": 0, "rejected": 0}
            for record in self.gate_log():
                if record.get("event") == "publish":
                    accepted = bool(record.get("accepted", record.get("live")))
                    # forced = made live although the gate would have kept it (not merely asked with force)
                    overridden = str(record.get("reason", "")).startswith("forced")
                    outcome = "accepted" if accepted else "rejected"
                    counts["forced" if accepted and overridden else outcome] += 1
            for outcome, n in counts.items():
                decisions.add_metric([outcome], n)
            yield decisions
        if self.job_counts is not None:
            try:
                rows = list(self.job_counts())
            except Exception:  # an unreachable queue must not break /metrics
                logger.debug("job store unreadable for /metrics", exc_info=True)
                return
            jobs = GaugeMetricFamily(
                "search_jobs",
                "Jobs in the job store by type and state (the newest 10,000).",
                labels=["type", "state"],
            )
            for job_type, state, n in rows:
                jobs.add_metric([job_type, state], n)
            yield jobs


class CollectionSeries(Collector):
    """Every loaded collection's own series (AppMetrics.for_collection), re-exported with a `collection`
    label; `sources` is set by the collection registry and lists only what is loaded now. The default
    collection's keep the labels they had before collections (none added: `collection=""` in PromQL), so
    dashboards of a one-collection deployment read on unchanged."""

    def __init__(self) -> None:
        self.sources: Callable[[], Iterable[tuple[str, CollectorRegistry]]] = lambda: ()

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for name, registry in self.sources():
            for family in registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type)
                labels = {} if name == DEFAULT_COLLECTION else {"collection": name}
                for sample in family.samples:
                    merged.add_sample(sample.name, {**labels, **sample.labels}, sample.value)
        yield from families.values()
