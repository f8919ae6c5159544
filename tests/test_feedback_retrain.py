"""A retrain job that trains on relevance feedback: the real app (TestClient with its lifespan), judgments
posted through POST /feedback on what /search showed, a real SQLite queue and a real worker subprocess.

Ten judged queries, each judging the third hit relevant: a seeded 2 of them are held out, 8 train (one pair
each) with the two hits shown above as their hard negatives. The manifest's `training_config.data.
n_train_pairs` (what the trainer iterated over) proves which pairs trained: the dataset's plus 8 (unset:
include), the dataset's alone (exclude), 8 alone (only). Two steps at a tiny lr keep each job short.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from contract.bundles.bundle import read_manifest
from contract.bundles.folder import BundleFolder
from tests.app.conftest import wait_until
from tests.retrain_stack import retrain_stack
from training.data.split import load_split

pytestmark = pytest.mark.slow

KEY = {"X-API-Key": "fb-key"}
QUICK = {"max_steps": 2, "max_seq_length": 32, "batch_size": 8, "lr": 1e-7, "eval_max_queries": 10,
         "onnx": False, "distill": False, "report": False, "validation_fraction": 0.0, "corpus_title_pairs": 0,
         "corpus_sentence_pairs": 0, "retrain_scope": "full"}  # fmt: skip
N_JUDGED = 10


@pytest.fixture(scope="module")
def env(tmp_path_factory, demo_dataset) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("feedback-job")
    with retrain_stack(root, demo_dataset, api_key=KEY["X-API-Key"], n_train=16, n_test=8) as stack:
        train = load_split(stack.data_dir, "train")
        yield {"client": stack.client, "bundles": stack.bundles, "first": stack.first, "log": stack.log,
               "n_dataset_pairs": sum(len(r) for r in train.qrels.values()),
               "queries": sorted(set(load_split(stack.data_dir, "test").queries.values()) |
                                 set(train.queries.values()))[:N_JUDGED]}  # fmt: skip


def _judge(client: TestClient, queries: list[str]) -> None:
    """Each query searched; its third hit judged relevant, tied to what was shown by the search id."""
    judgments = []
    for query in queries:
        r = client.post("/search", json={"query": query, "top_k": 5})
        assert r.status_code == 200, r.text
        shown = r.json()["results"][0]
        judgments.append(
            {
                "query": query,
                "document_id": shown["hits"][2]["id"],
                "relevant": True,
                "search_id": shown["search_id"],
            }
        )
    r = client.post("/feedback", json={"judgments": judgments}, headers=KEY)
    assert r.status_code == 200 and r.json()["stored"] == len(queries), r.text


def _run(env: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    client = env["client"]
    r = client.post("/jobs", json={"type": "retrain", "dataset": "mini", "options": options}, headers=KEY)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]

    def finished() -> dict[str, Any] | None:
        job = client.get(f"/jobs/{job_id}", headers=KEY).json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    tail = lambda: env["log"].read_text(errors="replace")[-3000:]  # noqa: E731
    job = wait_until(finished, 300, "the retrain job", interval=0.3, detail=lambda: f"worker log:\n{tail()}")
    assert job["state"] == "succeeded", (job, tail())
    return job


def _trained_pairs(env: dict[str, Any], job: dict[str, Any]) -> int:
    manifest = read_manifest(env["bundles"] / job["bundle_version"])
    return int(manifest.training_config.model_dump()["data"]["n_train_pairs"])


def test_a_bad_feedback_value_is_a_422_naming_the_field(env):
    body = {"type": "retrain", "dataset": "mini", "options": {"feedback": "sometimes"}}
    r = env["client"].post("/jobs", json=body, headers=KEY)
    assert r.status_code == 422, r.text
    assert "feedback" in r.text


def test_judgments_train_by_default_and_a_held_out_slice_is_scored(env):
    _judge(env["client"], env["queries"])
    job = _run(env, QUICK)
    fb = job["feedback"]
    assert fb["use"] == "include" and "positive judgments" in fb["reason"], fb
    assert (fb["train_queries"], fb["train_pairs"], fb["heldout_queries"]) == (8, 8, 2), fb
    assert fb["hard_negatives"] == 16, fb  # the two hits shown above each relevant one
    assert _trained_pairs(env, job) == env["n_dataset_pairs"] + 8
    held = fb["heldout"]
    assert held["queries"] == 2 and held["live_version"] == env["first"]
    assert 0.0 <= held["candidate_ndcg@10"] <= 1.0 and 0.0 <= held["live_ndcg@10"] <= 1.0
    manifest = read_manifest(env["bundles"] / job["bundle_version"])
    assert manifest.metrics["feedback"]["ndcg@10"] == held["candidate_ndcg@10"]  # beside metrics["test"]
    assert manifest.extras["retrain_plan"]["feedback"] == "include"
    # 2 held-out queries are fewer than the gate compares on: it says so instead of deciding on them
    assert "held-out feedback not gated" in job["gate_reason"], job["gate_reason"]
    card = (env["bundles"] / job["bundle_version"] / "README.md").read_text()
    assert "held-out" in card.lower()


def test_exclude_ignores_the_judgments_and_only_trains_on_them_alone(env):
    excluded = _run(env, QUICK | {"feedback": "exclude"})
    assert excluded["feedback"]["use"] == "exclude" and "heldout" not in excluded["feedback"]
    assert _trained_pairs(env, excluded) == env["n_dataset_pairs"]
    assert "feedback" not in read_manifest(env["bundles"] / excluded["bundle_version"]).metrics
    only = _run(env, QUICK | {"feedback": "only"})
    assert only["feedback"]["use"] == "only" and only["feedback"]["train_pairs"] == 8
    assert _trained_pairs(env, only) == 8


def test_start_from_live_fine_tunes_the_model_it_serves(env):
    live = BundleFolder(env["bundles"]).current_version()
    job = _run(env, QUICK | {"start_from": "live", "feedback": "only"})
    manifest = read_manifest(env["bundles"] / job["bundle_version"])
    # the base model the trainer loaded (run_artifacts records it) was the live version's copy
    assert manifest.base_model == live, manifest.base_model
    plan = manifest.extras["retrain_plan"]
    assert (plan["start_from"], plan["start_reason"]) == ("live", f"live bundle {live}"), plan


def test_start_from_live_with_a_query_side_retrain_is_a_422_naming_it(env):
    options = {"start_from": "live", "retrain_scope": "query"}
    body = {"type": "retrain", "dataset": "mini", "options": options}
    r = env["client"].post("/jobs", json=body, headers=KEY)
    assert r.status_code == 422, r.text
    assert "start_from live" in r.text, r.text
