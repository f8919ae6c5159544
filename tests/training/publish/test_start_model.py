"""Where a full retrain starts (training/publish/start_model.py): the refusals that need the bundles folder,
checked before any training, each naming the option. The start itself is proven end to end by
tests/test_feedback_retrain.py (a retrain job that starts from the live bundle)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract.errors import JobOptionsInvalid
from contract.jobs.plan import DataPlan, PublicationPlan, RetrainPlan
from contract.jobs.queue import RetrainOptions
from training.publish.start_model import resolve_start

VERSION = "20261204T120000.000000Z-abc123"


def _plan(bundles, **update) -> RetrainPlan:
    plan = RetrainPlan(
        data=DataPlan(data_dir="unused"), publication=PublicationPlan(bundles_dir=str(bundles)), scope="full"
    )
    return plan.model_copy(update=update)


def test_base_is_unchanged_and_says_so(tmp_path):
    plan = resolve_start(_plan(tmp_path), tmp_path / "work")
    assert plan.training.base_model is None and plan.start_reason == "the base model"


def test_live_without_a_live_bundle_names_the_option(tmp_path):
    with pytest.raises(JobOptionsInvalid, match="start_from: live, but the collection has no live bundle"):
        resolve_start(_plan(tmp_path, start_from="live"), tmp_path / "work")


def test_live_of_a_two_tower_bundle_is_refused(tmp_path):
    model = tmp_path / VERSION / "model"
    (model / "document").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (tmp_path / "CURRENT").write_text(VERSION)
    with pytest.raises(JobOptionsInvalid, match="query-side retrain \\(two towers\\)"):
        resolve_start(_plan(tmp_path, start_from="live"), tmp_path / "work")
    assert not (tmp_path / "work").exists()  # nothing copied


def test_live_copies_the_live_model_and_makes_it_the_base(tmp_path):
    model = tmp_path / VERSION / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"marker": 1}')
    (tmp_path / "CURRENT").write_text(VERSION)
    plan = resolve_start(_plan(tmp_path, start_from="live"), tmp_path / "work")
    copy = tmp_path / "work" / "live-model" / VERSION
    assert plan.training.base_model == str(copy) and plan.start_reason == f"live bundle {VERSION}"
    assert (copy / "config.json").read_text() == '{"marker": 1}'


def test_a_job_naming_two_starting_models_is_refused_at_submission():
    with pytest.raises(ValidationError, match="start_from live and base_model name two starting models"):
        RetrainOptions(start_from="live", base_model="my-model")
