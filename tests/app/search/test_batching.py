"""Dynamic micro-batching (app/engine/batching.py): batched answers equal the per-request path's, and how long a
batch waits for more queries (the policy in the module docstring)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from app.engine.batching import Inference, MicroBatcher, _Pending
from app.engine.live_bundle import EncoderOptions, LiveBundle, SearchSpec, open_live_bundle
from app.metrics import AppMetrics
from contract.bundles.bundle import load_bundle


@pytest.fixture(scope="module")
def live(staged) -> LiveBundle:
    # ONNX fp32: the torch vectors (test_onnx.py), loaded in a fraction of the torch model's time
    return open_live_bundle(load_bundle(staged["A"]), "onnx", EncoderOptions(encode_batch_size=3))


@pytest.fixture(scope="module")
def torch_live(staged) -> LiveBundle:
    """A backend whose micro-batches wait for more (ONNX ones never do: test_onnx_batches_never_wait)."""
    return open_live_bundle(load_bundle(staged["A"]), "torch", EncoderOptions(encode_batch_size=3))


def batcher(*, max_wait_s: float = 0.0, max_size: int = 64) -> MicroBatcher:
    return MicroBatcher(
        Inference(), max_size=max_size, max_wait_s=max_wait_s, queue_max=256, metrics=AppMetrics()
    )


def test_queued_requests_form_one_batch_with_the_per_request_answers(live, slice_data, doc_embeddings):
    texts = list(slice_data.queries.values())[:10]
    specs = [SearchSpec(texts=[t], vectors=None, top_k=5, include=["title"]) for t in texts]
    specs.append(SearchSpec(texts=texts[:2], vectors=None, top_k=3))  # a request with two queries
    specs.append(SearchSpec(texts=None, vectors=doc_embeddings[:1], top_k=4))  # a vector query
    specs.append(SearchSpec(texts=[texts[0]], vectors=None, top_k=5, filter={"group": "a"}))  # searched alone

    async def run_batched() -> tuple[MicroBatcher, list]:
        b = batcher()
        pending = [asyncio.ensure_future(b.submit(live, s)) for s in specs]
        await asyncio.sleep(0)  # every request is queued before the worker starts: one batch takes all
        await b.start()
        answers = await asyncio.gather(*pending)
        await b.stop()
        b.inference.shutdown()
        return b, answers

    b, answers = asyncio.run(run_batched())
    registry = b.metrics.registry
    # the filtered request is its own FAISS call, but all 15 queries were collected as one batch
    assert registry.get_sample_value("search_batch_queries_sum") == sum(s.n for s in specs)
    assert registry.get_sample_value("search_batch_queries_count") == 1
    for spec, answer in zip(specs, answers, strict=True):
        alone = live.answer(spec)  # the per-request path
        assert [[h.id for h in q] for q in answer.hits] == [[h.id for h in q] for q in alone.hits]
        np.testing.assert_allclose(
            [h.score for q in answer.hits for h in q], [h.score for q in alone.hits for h in q], atol=1e-5
        )
        assert [h.title for q in answer.hits for h in q] == [h.title for q in alone.hits for h in q]
    assert all(h.metadata is None for q in answers[-1].hits for h in q)
    assert answers[-1].hits[0], "the filtered request found documents of group a"


def collect(b: MicroBatcher, live: LiveBundle, arrivals: list[float]) -> list[_Pending]:
    """Run one `_collect` while one-query requests arrive at the given times (seconds from now)."""

    async def go() -> list[_Pending]:
        loop = asyncio.get_running_loop()
        for delay in arrivals:
            item = _Pending(live, SearchSpec(texts=["q"], vectors=None, top_k=1), loop.create_future())
            loop.call_later(delay, b.queue.put_nowait, item)
        return await b._collect()

    return asyncio.run(go())


def test_a_lone_client_never_waits(live):
    b = batcher(max_wait_s=5.0)  # last batch held one query (the start state)
    assert len(collect(b, live, [0.0, 0.3])) == 1


def test_a_batch_waits_until_it_is_as_large_as_the_last_one_and_no_longer(torch_live):
    b = batcher(max_wait_s=5.0)
    b._last_batch = 2
    # the 3rd request arrives well before the deadline: a batch that waited past its target would take it
    assert len(collect(b, torch_live, [0.0, 0.05, 1.0])) == 2
    assert b._last_batch == 2


def test_the_wait_is_capped_by_the_encoder_sub_batch_and_follows_the_load_down(torch_live):
    assert torch_live.encode_batch_size == 3
    b = batcher(max_wait_s=5.0)
    b._last_batch = 30
    assert (
        len(collect(b, torch_live, [0.0, 0.05, 0.1, 1.0])) == 3
    )  # waits for 3 (the encoder's chunk), not 30
    b = batcher(max_wait_s=0.1)
    b._last_batch = 4
    assert len(collect(b, torch_live, [0.0, 1.0])) == 1  # gave up at max_wait
    assert b._last_batch == 1  # so the next lone request does not wait at all


def test_encode_batch_size_defaults_per_backend(staged):
    bundle = load_bundle(staged["A"])
    assert open_live_bundle(bundle, "torch").encode_batch_size == 8
    assert open_live_bundle(bundle, "onnx-int8").encode_batch_size == 32
    assert open_live_bundle(bundle, "onnx-int8", EncoderOptions(encode_batch_size=16)).encode_batch_size == 16


def test_onnx_batches_never_wait_but_take_what_is_pending(live):
    """A batch saves onnxruntime too little to idle for (app/engine/live_bundle.py's NEVER_WAIT): after a
    batch of 30 it takes the requests already queued and goes, where torch would wait for more."""
    assert live.batch_wait == 1 and live.encode_batch_size == 3
    b = batcher(max_wait_s=5.0)
    b._last_batch = 30
    assert len(collect(b, live, [0.0, 0.0, 0.5])) == 2  # both queued at once; the third comes too late
