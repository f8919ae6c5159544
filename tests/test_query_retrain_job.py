"""A retrain job with `retrain_scope: query`, submitted over HTTP, goes live without encoding a document.

The real app (TestClient with its lifespan), a real SQLite queue and a real worker subprocess, started
through tests/doc_encode_guard.py: in that worker any document encode raises, so the job succeeding is the
proof that the corpus was not encoded. The published version shares the parent's index, ids and documents
(the same inodes). Then the API rolls back to the parent and forward again: the gate's activation path
validates every checksum each time, and /search follows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.bundles.bundle import read_manifest
from tests.app.conftest import wait_until
from tests.retrain_stack import retrain_stack

pytestmark = pytest.mark.slow

KEY = {"X-API-Key": "query-key"}
# a few steps at a small lr: the tower moves and stays within the gate's tolerance (the machinery is tested
# here; what the query side gains is measured by bench/training/retrain_scale.py); the query-side knobs are job
# options like TrainConfig's (contract/query_config.py), and the published version records them
QUERY_JOB = {"retrain_scope": "query", "max_steps": 2, "query_lr": 1e-6, "query_lora_rank": 8, "query_batch_size": 8,
             "eval_max_queries": 10, "onnx": False, "distill": False, "validation_fraction": 0.0}  # fmt: skip


@pytest.fixture(scope="module")
def env(tmp_path_factory, demo_dataset) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("query-job")
    marker = root / "guard.pid"
    with retrain_stack(root, demo_dataset, api_key=KEY["X-API-Key"], n_train=24, n_test=10,
                       worker_module="tests.doc_encode_guard",
                       worker_env={"DOC_ENCODE_GUARD_MARKER": str(marker)}) as stack:  # fmt: skip
        yield {"client": stack.client, "bundles": stack.bundles, "first": stack.first, "log": stack.log,
               "marker": marker, "worker": stack.worker}  # fmt: skip


def _served(client: TestClient) -> str:
    r = client.post("/search", json={"query": "vitamin d and bone density", "top_k": 3})
    assert r.status_code == 200, r.text
    return str(r.json()["version"])


def test_a_query_side_retrain_job_goes_live_without_encoding_a_document(env):
    client, bundles, first = env["client"], env["bundles"], env["first"]
    tail = lambda: env["log"].read_text(errors="replace")[-3000:]  # noqa: E731
    r = client.post("/jobs", json={"type": "retrain", "dataset": "mini", "options": QUERY_JOB}, headers=KEY)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]

    def finished() -> dict[str, Any] | None:
        job = client.get(f"/jobs/{job_id}", headers=KEY).json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    job = wait_until(
        finished, 300, "the query-side job", interval=0.3, detail=lambda: f"worker log:\n{tail()}"
    )
    assert env["marker"].read_text() == str(env["worker"].pid)  # the job ran in the guarded worker
    assert job["state"] == "succeeded", (job, tail())  # any document encode would have failed it
    assert job["retrain_scope"] == "query" and job["tower"] == "query" and job["live"] is True, job
    assert job["scope_reason"] == "asked for (retrain_scope query)"  # why, in the record as in the manifest
    child = job["bundle_version"]
    plan = read_manifest(bundles / child).extras["retrain_plan"]  # the job's plan, recorded once
    assert plan["scope"] == "query" and plan["scope_reason"].startswith("asked for"), plan
    recorded = plan["query"]
    assert (recorded["query_lr"], recorded["query_lora_rank"], recorded["query_batch_size"]) == (1e-6, 8, 8)
    for name in ("index.faiss", "ids.json", "docs.sqlite"):
        assert os.stat(bundles / first / name).st_ino == os.stat(bundles / child / name).st_ino, name
    wait_until(lambda: _served(client) == child, 60, "the app to serve the query-side version")

    # roll back to the parent, then forward again: each activation validates every checksum
    for version in (first, child):
        r = client.post(f"/bundles/{version}/activate", headers=KEY)
        assert r.status_code == 200, r.text
        wait_until(lambda v=version: _served(client) == v, 60, f"the app to serve {version}")
    listing = client.get("/bundles").json()
    assert listing["live"] == child


def test_a_bad_query_side_option_is_refused_at_submission_naming_it(env):
    # `tower`: retrain_scope's deprecated name, still accepted
    body = {"type": "retrain", "dataset": "mini", "options": {"tower": "query", "query_lora_rank": 0}}
    r = env["client"].post("/jobs", json=body, headers=KEY)
    assert r.status_code in (400, 422), r.text
    # the field's own bound, not "extra inputs are not permitted": the option is known and its value checked
    assert "query_lora_rank" in r.text and "greater than or equal to 1" in r.text, r.text
