"""Fixtures of the training tests: one real `python -m training pipeline` run shared by the tests that
inspect its outputs (test_pipeline.py, test_cards.py), so the suite pays for it once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.data.beir_slice import beir_slice

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pipeline_run(demo_dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("cards")
    data = beir_slice(demo_dataset, root / "slice", n_train=12, n_test=6, n_distractors=20)
    bundles = root / "bundles"
    cmd = [
        sys.executable, "-m", "training", "pipeline",
        "--data", str(data), "--bundles", str(bundles), "--work-dir", str(root / "runs"),
        "--quiet", "--max-steps", "2", "--batch-size", "4", "--max-seq-length", "32",
        "--hard-negatives", "0", "--epochs", "1", "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    version = (bundles / "CURRENT").read_text().strip()
    return {
        "root": root,
        "data": data,
        "bundles": bundles,
        "version": version,
        "run": Path(json.loads(done.stdout)["run_dir"]),
        "stdout": done.stdout,
        "stderr": done.stderr,
    }
