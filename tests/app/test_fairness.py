"""Work budget, fair slicing and the response-size cap (issue 11, item 6), on the real app and encoder.

Latency itself is measured by bench/serving/fairness_bench.py (no timing thresholds here); the tests prove the
mechanisms: the budget counts tokens, slices give the same answers, a small request overtakes a big one.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from app.engine.live_bundle import SearchSpec
from app.engine.token_slicing import slices
from app.main import create_app
from tests.app.conftest import make_settings, wait_until

LONG = " ".join(["the effect of vitamin d supplementation on bone mineral density"] * 30)  # > 256 tokens


def test_slices_keep_order_and_respect_the_budget():
    spec = SearchSpec(texts=list("abcdef"), vectors=None, top_k=3, tokens=[5, 5, 20, 1, 1, 1])
    parts = slices(spec, 10)
    assert [p.texts for p in parts] == [["a", "b"], ["c"], ["d", "e", "f"]]  # "c" alone exceeds: its own
    assert all(p.top_k == 3 for p in parts)
    assert slices(spec, 100) == [spec]


def test_slices_cap_queries_too():
    spec = SearchSpec(texts=list("abcde"), vectors=None, top_k=3, tokens=[1, 1, 1, 1, 1])
    assert [p.texts for p in slices(spec, 256, 2)] == [["a", "b"], ["c", "d"], ["e"]]
    assert slices(spec, 256) == [spec]


def test_a_single_query_waits_for_one_slice_of_many_short_queries(live_bundles):
    """A batch of 40 short queries fits one 256-token slice: before the query cap a single query sent
    while it ran waited for all 40; now it runs after the slice in flight, ahead of the rest."""
    bundles, _ = live_bundles
    settings = make_settings(bundles, reload_poll_seconds=0, fair_slice_queries=4, encoder_backend="torch")
    with TestClient(create_app(settings)) as client:
        live = client.app.state.hot_swap.require()
        runner, real = client.app.state.runner, live.answer_batch
        order: list[list[str]] = []  # each batch's query texts, as the inference thread ran them

        def recording(specs):
            order.append([t for s in specs for t in (s.texts or [])])
            return real(specs)

        live.answer_batch = recording
        gate = threading.Event()
        client.app.state.inference.executor.submit(gate.wait, 30)  # hold the inference thread
        big = [f"query number {i} about bones" for i in range(40)]
        with ThreadPoolExecutor(2) as pool:
            big_done = pool.submit(client.post, "/search", json={"queries": big, "top_k": 3})
            wait_until(lambda: runner.pending() + runner.in_flight >= 1, what="the big request's first slice")
            small = pool.submit(client.post, "/search", json={"query": "vitamin d", "top_k": 3})
            wait_until(lambda: runner.pending() >= 1, what="the single query queued")
            gate.set()
            assert small.result(timeout=120).status_code == 200
            assert big_done.result(timeout=120).status_code == 200
        single = next(i for i, texts in enumerate(order) if "vitamin d" in texts)
        before = sum(len(texts) for texts in order[:single])
        assert before <= 4, f"{before} of the big request's queries ran before the single query"
        assert [t for texts in order if "vitamin d" not in texts for t in texts] == big  # in order, once


def test_the_budget_counts_tokens_not_characters(live_bundles):
    bundles, _ = live_bundles
    settings = make_settings(bundles, reload_poll_seconds=0, max_request_tokens=300)
    with TestClient(create_app(settings)) as client:
        # 2,000 characters of one repeated character is few tokens; 2 long queries are > 300 tokens
        assert client.post("/search", json={"query": "a" * 2000}).status_code == 200
        r = client.post("/search", json={"queries": [LONG, LONG]})
        assert r.status_code == 413 and r.json()["error"]["code"] == "token_budget"
        assert r.json()["error"]["message"].startswith("body.queries: 512 tokens, above this server's budget")


def test_sliced_answers_equal_unsliced_ones(live_bundles):
    bundles, _ = live_bundles
    queries = ["vitamin d and bones", LONG, "statins and muscle pain", "gene therapy", LONG[:300]]
    body = {"queries": queries, "top_k": 5, "include": ["title"]}
    answers = []
    for slice_tokens, slice_queries in ((8, 100), (100_000, 1), (100_000, 100)):  # the last: one slice
        settings = make_settings(
            bundles, reload_poll_seconds=0, fair_slice_tokens=slice_tokens, fair_slice_queries=slice_queries
        )
        with TestClient(create_app(settings)) as client:
            r = client.post("/search", json=body)
            assert r.status_code == 200, r.text
            answers.append(
                [[(h["id"], round(h["score"], 4)) for h in q["hits"]] for q in r.json()["results"]]
            )
    assert answers[0] == answers[2] and answers[1] == answers[2]


@pytest.mark.parametrize("microbatch", [True, False])
def test_a_small_request_overtakes_a_big_one(live_bundles, microbatch):
    """A big request in one-query slices: a query sent while its first slice runs finishes before it."""
    bundles, _ = live_bundles
    # the torch encoder: `auto` may pick the static tower on the demo bundle (timed at load), whose
    # microsecond slices finish the big request before the small one is even sent
    settings = make_settings(
        bundles,
        reload_poll_seconds=0,
        fair_slice_tokens=256,
        max_request_tokens=100_000,  # the big request's 24 long queries are above the default budget
        microbatch_enabled=microbatch,
        encoder_backend="torch",
    )
    with TestClient(create_app(settings)) as client:
        inference = client.app.state.inference
        gate = threading.Event()
        inference.executor.submit(gate.wait, 30)  # hold the inference thread until the big one queues
        done: dict[str, float] = {}

        def send(name: str, body: dict) -> int:
            status = client.post("/search", json=body).status_code
            done[name] = time.perf_counter()
            return status

        with ThreadPoolExecutor(2) as pool:
            # 24 slices: enough that a loaded machine's scheduling jitter (the small request's trip through
            # the client and the middleware) cannot outlast all of them, as it did once with 8
            big = pool.submit(send, "big", {"queries": [LONG] * 24, "top_k": 3})
            runner = client.app.state.runner
            wait_until(
                lambda: runner.pending() >= 1 or getattr(runner, "in_flight", 0) >= 1, what="big queued"
            )
            gate.set()
            time.sleep(0.05)  # the big request's first slice is running now
            small = pool.submit(send, "small", {"query": "vitamin d", "top_k": 3})
            assert big.result(timeout=120) == 200 and small.result(timeout=120) == 200
        assert done["small"] < done["big"]


def test_a_too_large_answer_is_refused_clearly(live_bundles):
    bundles, _ = live_bundles
    settings = make_settings(bundles, reload_poll_seconds=0, max_response_bytes=10_000)
    with TestClient(create_app(settings)) as client:
        r = client.post("/search", json={"query": "bone", "top_k": 200, "include": ["title", "text"]})
        assert r.status_code == 413 and r.json()["error"]["code"] == "response_too_large"
        assert "top_k" in r.json()["error"]["message"]
        assert client.post("/search", json={"query": "bone", "top_k": 200}).status_code == 200
