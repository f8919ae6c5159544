"""`python -m training pipeline`: train → report → index → publish, as the demo and compose bootstrap run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contract.bundles.bundle import load_bundle
from training.bundle.store import BundleStore


def test_pipeline_command_publishes_a_live_bundle_with_its_report(pipeline_run):
    # the shared run (tests/training/conftest.py): `pipeline --quiet --json`, ONNX on
    summary = json.loads(pipeline_run["stdout"])
    assert "ndcg@10" in summary["tuned"] and summary["publish"]["live"] is True

    bundles = pipeline_run["bundles"]
    store = BundleStore(bundles)
    version = store.current_version()
    assert version is not None and version == summary["publish"]["version"]
    bundle = load_bundle(bundles / version)  # validates checksums, dims and counts
    manifest = bundle.manifest
    # the config travels with the artifact, the report came along, the gate metric is the exact one
    assert manifest.training_config.config is not None and manifest.training_config.config.max_steps == 2
    assert manifest.base_model == "all-MiniLM-L6-v2"  # a name, not the run's {path, name, package} record
    assert bundle.report is not None and bundle.report.n_test > 0
    assert 0.0 <= manifest.metrics["test"]["ndcg@10"] <= 1.0
    tuned = json.loads((pipeline_run["run"] / "metrics.json").read_text())["tuned"]
    # the bundle's gate metric (all test queries, corpus embeddings reused from training) matches the
    # trainer's own evaluation of the tuned model
    assert manifest.metrics["test"]["ndcg@10"] == pytest.approx(tuned["ndcg@10"], abs=1e-4)


def test_pipeline_command_refuses_a_missing_dataset_in_one_line(tmp_path):
    missing = tmp_path / "nope"
    cmd = [
        sys.executable,
        "-m",
        "training",
        "pipeline",
        "--data",
        str(missing),
        "--bundles",
        str(tmp_path / "b"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert str(missing) in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "b").exists()
