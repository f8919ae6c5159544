"""The `live` section of GET /generalization-gap: no verdict below MIN_QUERIES judged queries, a verdict with
finite numbers above it (judgments from the fixture's test qrels), and the P1 risk equal to a brute-force
recomputation on a tiny case (the oracle)."""

from __future__ import annotations

import math

import numpy as np
from fastapi.testclient import TestClient

from app.main import create_app
from contract.feedback import live_risk
from tests.app.conftest import make_settings, publish

KEY = {"X-API-Key": "test-key"}


def _judgments(slice_data, n_queries: int) -> list[dict]:
    qids = sorted(slice_data.qrels)[:n_queries]
    return [
        {"query": slice_data.queries[q], "document_id": d, "relevant": True}
        for q in qids
        for d in slice_data.qrels[q]
    ]


def test_live_section_needs_min_queries_then_gives_a_verdict(tmp_path, staged, slice_data):
    bundles = tmp_path / "bundles"
    publish(staged["A"], bundles)
    with TestClient(create_app(make_settings(bundles))) as client:
        version = client.get("/generalization-gap").json()["version"]
        few = _judgments(slice_data, live_risk.MIN_QUERIES - 1)
        sid = client.post("/search", json={"query": "x"}).json()["results"][0]["search_id"]
        few = [dict(j, search_id=sid) for j in few]  # a search id puts the judgment on the live version
        assert client.post("/feedback", json={"judgments": few}, headers=KEY).status_code == 200
        live = client.get("/generalization-gap").json()["live"]
        assert live["verdict"] == "not enough judgments yet" and "risk" not in live
        assert live["n_queries"] == live_risk.MIN_QUERIES - 1
        more = [dict(j, search_id=sid) for j in _judgments(slice_data, len(slice_data.qrels))]
        assert client.post("/feedback", json={"judgments": more}, headers=KEY).status_code == 200
        first = client.get("/generalization-gap").json()
        live = first["live"]
        exposed = client.get("/metrics").text
    assert f'search_live_verdict{{verdict="{live["verdict"]}"}} 1.0' in exposed
    assert f"search_live_risk_nats {live['risk']['value']}" in exposed
    assert first["version"] == version
    assert live["verdict"] in ("consistent", "worse than predicted", "better than predicted")
    assert live["n_queries"] == len(slice_data.qrels)
    risk = live["risk"]
    assert all(math.isfinite(risk[f]) for f in ("value", "ci_low", "ci_high"))
    assert risk["ci_low"] <= risk["value"] <= risk["ci_high"]
    assert 0 < live["mrr"] <= 1 and 0 < live["ndcg_at_10"] <= 1
    assert live["mrr"] > 0.3  # the fixture model ranks its own test positives high


def test_p1_loss_equals_brute_force():
    rng = np.random.default_rng(3)
    sim = rng.normal(size=(3, 6))
    pos = np.array([sim[0, 0], sim[1, 2], sim[2, 5]])
    allowed = [np.array([1, 2, 3, 4, 5]), np.array([0, 1, 3, 4, 5]), np.array([0, 1, 2, 3, 4])]
    k, tau = 4, 0.5
    got = live_risk.p1_losses(sim, pos, allowed, k, tau, np.random.default_rng(7))
    draw = np.random.default_rng(7)
    for i in range(3):
        negs = [sim[i, allowed[i][j]] for j in draw.integers(0, len(allowed[i]), size=k)]
        want = math.log(1 + sum(math.exp((s - pos[i]) / tau) for s in negs)) - math.log(k)
        assert math.isclose(got[i], want, rel_tol=1e-12)
    risk = live_risk.risk_with_ci(got, np.array([0, 0, 1]))
    assert math.isclose(risk.value, float(np.mean(got))) and risk.n_queries == 2
    assert live_risk.verdict(risk, risk.ci_high + 1, risk.ci_high + 2) == "better than predicted"
    assert live_risk.verdict(risk, risk.ci_low - 2, risk.ci_low - 1) == "worse than predicted"
    assert live_risk.verdict(risk, risk.value, risk.value) == "consistent"
