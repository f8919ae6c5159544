"""GET /metrics scraped from the real app and parsed with prometheus-client's own parser."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from tests.app.conftest import make_settings

KEY = {"X-API-Key": "test-key"}


def test_metrics_parse_and_follow_prometheus_naming(live_bundles, tmp_path):
    bundles, version = live_bundles
    (tmp_path / "data" / "mini").mkdir(parents=True)
    (tmp_path / "data" / "mini" / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    settings = make_settings(
        bundles, data_root=tmp_path / "data", queue_url=f"sqlite:///{tmp_path / 'jobs.db'}"
    )
    with TestClient(create_app(settings)) as client:
        before = client.get("/metrics").text
        assert "search_jobs{" not in before  # no job store yet: the scrape does not create one
        assert client.post("/search", json={"query": "cells", "top_k": 2}).status_code == 200
        assert client.post("/embed", json={"input": ["cells"]}).status_code == 200
        assert (
            client.post("/jobs", json={"type": "reindex", "dataset": "mini"}, headers=KEY).status_code == 202
        )
        text = client.get("/metrics").text

    families = {f.name: f for f in text_string_to_metric_families(text)}  # raises on malformed text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    # process, platform and GC collectors live in the app's registry
    assert value("process_resident_memory_bytes") > 10_000_000
    assert "python_info" in families and "python_gc_objects_collected" in families
    # Prometheus naming: _seconds durations, _ratio for recall, _total counters, one info metric, no _created
    assert families["search_http_request_duration_seconds"].type == "histogram"
    assert value("search_index_recall_at_10_ratio") == 1.0
    assert value("search_bundle_info", version=version, encoder_backend="torch", metric="cosine") == 1.0
    assert "search_bundle_live" not in families and "search_http_request_seconds" not in families
    assert not [name for name, _ in samples if name.endswith("_created")]
    for family in families.values():
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
    # encode vs index-search latency: the search observed both, the embed only the encoder
    assert value("search_encode_duration_seconds_count") == 2
    assert value("search_index_search_duration_seconds_count") == 1
    # gate decisions by outcome (the conftest published bundle A with force on an empty folder: accepted)
    assert value("search_gate_decisions_total", outcome="accepted") >= 1
    assert value("search_gate_decisions_total", outcome="rejected") == 0
    # jobs by type and state, from the job store the POST /jobs created
    assert value("search_jobs", type="reindex", state="queued") == 1
    assert value("search_http_requests_total", route="/embed", method="POST", status="200") == 1
