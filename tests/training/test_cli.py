"""`python -m training train` as a user runs it: real subprocesses, help text and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contract.config import TrainConfig
from training.cli.config_options import HELP

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "training", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
    )


def test_train_help_lists_and_explains_every_config_field():
    result = _run("train", "--help")
    assert result.returncode == 0, result.stderr
    assert HELP.keys() == TrainConfig.model_fields.keys()  # every field has its explanation
    help_text = " ".join(result.stdout.split())
    for name in TrainConfig.model_fields:
        assert f"--{name.replace('_', '-')}" in result.stdout, name
        assert " ".join(HELP[name].split()[:4]) in help_text, name
    for option in ("--data", "--out", "--config"):
        assert option in result.stdout


def test_bad_data_path_is_one_line_naming_the_path(tmp_path):
    missing = tmp_path / "no-such-dataset"
    result = _run("train", "--data", str(missing), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_dataset_content_and_bad_options_are_one_line_errors(tmp_path):
    # A BEIR folder whose corpus has a broken line: the data reader's error names file and line
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "ok"}\n{not json\n')
    (data / "queries.jsonl").write_text('{"_id": "q1", "text": "a question"}\n')
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    result = _run("train", "--data", str(data), "--out", str(tmp_path / "out"), "--quiet")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "corpus.jsonl:2" in last
    assert "Traceback" not in result.stderr

    bad_option = _run("train", "--data", str(data), "--out", str(tmp_path / "out"), "--lr", "-1")
    assert bad_option.returncode == 2 and bad_option.stderr.strip() == (
        "error: invalid option --lr: Input should be greater than 0"
    )
    config = tmp_path / "config.json"
    config.write_text('{"epochs": 0}')
    from_file = _run("train", "--data", str(data), "--out", str(tmp_path / "out"), "--config", str(config))
    assert from_file.returncode == 2 and "--epochs" in from_file.stderr and str(config) in from_file.stderr
