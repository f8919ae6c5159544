"""contract/jobs/plan.py: a retrain job's flat options become one plan, grouped by concern, each default
resolved once; the old `tower` key is mapped to `retrain_scope`; the manifest's record holds no secret."""

from __future__ import annotations

import logging

import pytest

from contract.defaults import GATE_METRIC, GATE_TOLERANCE, KEEP_VERSIONS, TARGET_RECALL
from contract.index.backend import BackendConfig
from contract.jobs.plan import CLI_SCOPE, JOB_SCOPE, scope_of
from contract.jobs.queue import ReindexOptions, RetrainOptions


def _plan(options: dict, backend: BackendConfig | None = None):
    return RetrainOptions.model_validate(options).plan(data_dir="d", bundles_dir="b", backend=backend)


def test_a_job_plan_groups_the_options_and_resolves_the_defaults_once():
    plan = _plan({"max_steps": 3, "query_lr": 1e-4, "index_kind": "flat", "force": True})
    assert plan.training.max_steps == 3 and plan.query.query_lr == 1e-4
    assert plan.index.kind == "flat" and plan.index.target_recall == TARGET_RECALL
    publication = plan.publication
    assert (publication.keep, publication.gate_metric, publication.tolerance) == (
        KEEP_VERSIONS,
        GATE_METRIC,
        GATE_TOLERANCE,
    )
    assert publication.force and publication.bundles_dir == "b" and plan.data.data_dir == "d"
    assert plan.scope == JOB_SCOPE == "auto" and CLI_SCOPE == "full"


def test_the_data_splits_are_the_training_configs():
    plan = _plan({"train_split": "dev", "eval_split": "dev"})
    assert (plan.data.train_split, plan.data.eval_split) == ("dev", "dev")


@pytest.mark.parametrize(
    ("options", "expected"), [({}, None), ({"distill": True}, True), ({"distill": False}, False)]
)
def test_distill_not_sent_means_where_it_can_run(options, expected):
    assert _plan(options).publication.distill is expected
    assert (
        ReindexOptions.model_validate(options).plan(data_dir="d", bundles_dir="b").publication.distill
        is expected
    )


def test_tower_is_the_deprecated_name_of_retrain_scope(caplog):
    with caplog.at_level(logging.WARNING, logger="contract.jobs.plan"):
        assert _plan({"tower": "query"}).scope == "query"
    assert "deprecated" in caplog.text
    assert _plan({"retrain_scope": "full"}).scope == "full"
    assert scope_of("full", "query", JOB_SCOPE) == "full"  # the new name wins when both are sent
    assert scope_of(None, None, CLI_SCOPE) == "full"


def test_the_recorded_plan_holds_no_connection_and_no_second_train_config():
    milvus = BackendConfig("milvus", "http://milvus:19530", "secret-token", "infonce")
    plan = _plan({"index_backend": "milvus"}, backend=milvus)
    assert plan.index.milvus and plan.index.backend is milvus
    record = plan.record()
    assert "secret-token" not in str(record) and "backend" not in record["index"]
    assert "training" not in record  # the manifest's training_config holds it, once
    assert record["scope"] == "auto" and "query_lr" in record["query"]
    resolved = plan.resolved("full", "the index backend is milvus", live_eligible=False)
    assert (resolved.scope, resolved.scope_reason, resolved.live_eligible) == (
        "full",
        "the index backend is milvus",
        False,
    )
