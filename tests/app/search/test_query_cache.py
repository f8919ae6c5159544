"""The query-embedding cache: LRU by (bundle version, backend, normalised text); hits and misses counted."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient

from app.engine.query_cache import QueryCache
from app.main import create_app
from tests.app.conftest import make_settings


class CountingEncoder:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.seen += texts
        return np.asarray([[float(len(t)), float(hash(t) % 97)] for t in texts], dtype=np.float32)


def test_only_misses_reach_the_encoder_and_rows_keep_their_order():
    enc, cache = CountingEncoder(), QueryCache(10)
    first = cache.encode("v1", "torch", ["a b", "c"], enc)
    again = cache.encode("v1", "torch", ["c", "  a   b ", "d"], enc)  # whitespace-normalised hit
    assert enc.seen == ["a b", "c", "d"]
    np.testing.assert_array_equal(again[:2], first[::-1])
    cache.encode("v2", "torch", ["c"], enc)  # another bundle version: a miss
    cache.encode("v1", "static", ["c"], enc)  # another encoder: a miss
    cache.encode("v1", "torch", ["C"], enc)  # case is kept (a cased model would differ)
    assert enc.seen[3:] == ["c", "c", "C"]


def test_least_recently_used_entries_leave_first():
    enc, cache = CountingEncoder(), QueryCache(2)
    cache.encode("v", "b", ["x", "y"], enc)
    cache.encode("v", "b", ["x"], enc)  # x is now the most recent
    cache.encode("v", "b", ["z"], enc)  # evicts y
    assert len(cache) == 2
    cache.encode("v", "b", ["x", "y"], enc)
    assert enc.seen == ["x", "y", "z", "y"]


def test_metrics_count_hits_and_misses_and_answers_do_not_change(live_bundles):
    bundles, _ = live_bundles
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0, query_cache_size=8))) as client:
        body = {"query": "cache probe: statins and hip fractures", "top_k": 5}
        cold = client.post("/search", json=body).json()["results"]
        warm = client.post("/search", json=body).json()["results"]
        text = client.get("/metrics").text
    assert [r["hits"] for r in cold] == [r["hits"] for r in warm]  # search ids carry their time
    assert "search_query_cache_hits_total 1.0" in text
    # the canary at load plus the cold request
    assert "search_query_cache_misses_total 2.0" in text


def test_size_zero_turns_the_cache_off(live_bundles):
    bundles, _ = live_bundles
    with TestClient(create_app(make_settings(bundles, reload_poll_seconds=0, query_cache_size=0))) as client:
        for _ in range(2):
            client.post("/search", json={"query": "no cache", "top_k": 1})
        text = client.get("/metrics").text
    assert "search_query_cache_hits_total 0.0" in text and "search_query_cache_misses_total 0.0" in text
