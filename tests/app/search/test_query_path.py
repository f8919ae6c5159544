"""The query path in one pass: each query text is tokenised once whatever the backend (torch, ONNX,
distilled, static, routed, a routed escalation included), and a query-cache hit is neither tokenised nor
encoded. Counted with wrappers around the real tokenizers; the answers are the real encoders'."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import app.engine.live_bundle as live_bundle_module
from app.engine.query_tokens import QueryTokenizer, encode_ids
from app.main import create_app
from contract.bundles.bundle import load_bundle
from contract.encoding.onnx_encoder import OnnxQueryEncoder
from contract.encoding.query_encoders import StaticQueryEncoder
from tests.app.conftest import make_settings, publish

LONG = "bone density and vitamin d supplements in older adults " * 30  # over the model's 256 tokens
TEXTS = ["query path: statins and muscle pain", "  gene   therapy ", LONG, "a", "naïve café"]


@pytest.fixture(scope="module")
def distilled_bundles(tmp_path_factory, staged_distilled):
    bundles = tmp_path_factory.mktemp("bundles-query-path")
    return bundles, publish(staged_distilled, bundles)


class CountingTokenizer:
    """A real `tokenizers.Tokenizer`, its encode calls logged as (owner, texts)."""

    def __init__(self, real: Any, owner: str, log: list[tuple[str, list[str]]]):
        self._real, self._owner, self._log = real, owner, log

    def encode_batch(self, texts: Any, *args: Any, **kwargs: Any) -> Any:
        self._log.append((self._owner, list(texts)))
        return self._real.encode_batch(texts, *args, **kwargs)

    def encode(self, text: Any, *args: Any, **kwargs: Any) -> Any:
        self._log.append((self._owner, [text]))
        return self._real.encode(text, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _count_tokenisations(live: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Wrap every tokenizer the query path can reach: the request's (LiveBundle.tokenize), the torch
    model's (sentence-transformers' own tokenisation) and each query encoder's own."""
    log: list[tuple[str, list[str]]] = []
    real_tokenize = live.tokenize

    def tokenize(texts: Any) -> Any:
        log.append(("request", list(texts)))
        return real_tokenize(texts)

    monkeypatch.setattr(live, "tokenize", tokenize)
    model = live.encoder.model
    for name in ("tokenize", "preprocess"):
        real = getattr(model, name, None)
        if real is not None:
            monkeypatch.setattr(
                model, name, lambda *a, _r=real, **k: (log.append(("torch", ["?"])), _r(*a, **k))[1]
            )
    encoders = list(getattr(live.query_encoder, "sides", (live.query_encoder,)))
    for enc in encoders:
        if getattr(enc, "tokenizer", None) is not None and not hasattr(enc, "model"):
            monkeypatch.setattr(enc, "tokenizer", CountingTokenizer(enc.tokenizer, type(enc).__name__, log))
    return log


def hits(response: Any) -> list[list[dict[str, Any]]]:
    return [r["hits"] for r in response.json()["results"]]


def _count_encodes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def counting(encoder: Any, texts: Any, token_ids: Any, *, batch_size: int) -> np.ndarray:
        calls.append(list(texts))
        return encode_ids(encoder, texts, token_ids, batch_size=batch_size)

    monkeypatch.setattr(live_bundle_module, "encode_ids", counting)
    return calls


@pytest.mark.parametrize(
    ("backend", "extra"),
    [
        ("torch", {}),
        ("onnx", {}),
        ("distilled", {}),
        ("static", {}),
        ("static-routed", {"route_margin": 0.0}),  # nothing escalated
        ("static-routed", {"route_margin": 2.0}),  # every query escalated to the full model
    ],
)
def test_each_query_is_tokenised_once_and_a_cache_hit_not_at_all(
    distilled_bundles, monkeypatch, backend, extra
):
    bundles, _ = distilled_bundles
    settings = make_settings(
        bundles,
        encoder_backend=backend,
        reload_poll_seconds=0,
        query_cache_size=64,
        max_ndcg_loss=1.0,
        **extra,
    )
    with TestClient(create_app(settings)) as client:
        live = client.app.state.hot_swap.live
        assert live.encoder_backend == backend and live.shares_ids
        log, encodes = _count_tokenisations(live, monkeypatch), _count_encodes(monkeypatch)
        cold = client.post("/search", json={"queries": TEXTS, "top_k": 3, "mode": "dense"})
        assert cold.status_code == 200, cold.text
        assert log == [("request", TEXTS)]  # once, by the request; no encoder tokenised again
        assert [t for call in encodes for t in call] == TEXTS  # in fair token slices, each text once
        if backend == "static-routed":
            counts = client.get("/bundles").json()["encoder_choice"]["routing"]["counts"]
            if extra["route_margin"] > 0:
                assert counts["routed"] >= len(TEXTS)  # the escalation reused the ids
            else:  # by margin nothing; only queries holding a token the table never saw
                assert counts["routed"] == counts["novel"]
        log.clear()
        encodes.clear()
        warm = client.post("/search", json={"queries": TEXTS, "top_k": 3, "mode": "dense"})
        assert warm.status_code == 200, warm.text
        assert log == [] and encodes == []  # every text a hit: no tokenisation, no encode
        assert hits(warm) == hits(cold)  # search ids carry their time
        mixed = client.post("/search", json={"queries": [TEXTS[0], "query path: a new one"], "top_k": 3})
        assert mixed.status_code == 200, mixed.text
        assert log == [("request", ["query path: a new one"])]  # only the miss
        assert encodes == [["query path: a new one"]]
        metrics = client.get("/metrics").text
    # hits and misses counted once per text: the canary, the cold request, the warm one, the mixed one
    assert f"search_query_cache_hits_total {len(TEXTS) + 1}.0" in metrics
    assert f"search_query_cache_misses_total {1 + len(TEXTS) + 1}.0" in metrics


def test_a_cache_hit_still_counts_its_tokens_against_the_budget(distilled_bundles):
    """The entry keeps its token count: a cached request over the budget is refused as before."""
    bundles, _ = distilled_bundles
    settings = make_settings(bundles, reload_poll_seconds=0, query_cache_size=64, max_request_tokens=300)
    with TestClient(create_app(settings)) as client:
        assert client.post("/search", json={"query": LONG, "top_k": 1}).status_code == 200  # 256 tokens
        again = client.post("/search", json={"queries": [LONG, "vitamin d " * 30], "top_k": 1})
    assert again.status_code == 413 and "tokens, above this server's budget of 300" in again.text


def test_every_encoder_encodes_the_shared_ids_as_its_own_tokenisation(staged_distilled):
    """The ids tokenised once for the request give each encoder the vectors its own tokenizer gives."""
    bundle = load_bundle(staged_distilled)
    ids = QueryTokenizer(bundle.encoder)(TEXTS)
    onnx = OnnxQueryEncoder.load(staged_distilled / "model")
    distilled = OnnxQueryEncoder.load(staged_distilled / "query_encoders" / "distilled")
    static = StaticQueryEncoder.load(staged_distilled / "query_encoders" / "static")
    for encoder in (onnx, distilled, static):
        for batch in (1, 3):
            want = encoder.encode(TEXTS, batch_size=batch)
            np.testing.assert_array_equal(encoder.encode_ids(TEXTS, ids, batch_size=batch), want)
