"""Which validation queries the index step tunes on: the very carve the run was trained without."""

from __future__ import annotations

import pytest

from training.data.beir_slice import beir_slice
from training.data.split import load_split
from training.data.validation_carve import carve_validation
from training.hybrid.lexical_step import validation_split


@pytest.fixture(scope="module")
def folder(demo_dataset, tmp_path_factory):
    return beir_slice(demo_dataset, tmp_path_factory.mktemp("slice"), n_train=16, n_test=4, n_distractors=5)


def test_the_runs_own_carve_is_reproduced(folder):
    config = {"config": {"validation_fraction": 0.25, "seed": 3, "train_split": "train"}}
    val = validation_split(folder, config)
    want = carve_validation(load_split(folder, "train"), 0.25, 3)[1]
    assert val is not None and set(val.queries) == set(want.queries) and len(val.queries) == 4
    other = validation_split(folder, {"config": {"validation_fraction": 0.25, "seed": 4}})
    assert other is not None and set(other.queries) != set(val.queries)


def test_no_validation_when_the_run_held_none_out_or_there_is_no_train_split(folder):
    assert validation_split(folder, {"config": {"validation_fraction": 0.0, "seed": 0}}) is None
    assert validation_split(folder, {"config": {"validation_fraction": 0.2, "train_split": "nope"}}) is None
    untrained = validation_split(folder, {})  # the base model was trained on nothing: the default carve
    assert untrained is not None and len(untrained.queries) == round(0.2 * 16)
