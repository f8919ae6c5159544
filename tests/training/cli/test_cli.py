"""`python -m training train` as a user runs it: real subprocesses, help text and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contract.config import TrainConfig
from training.cli.config_options import HELP

REPO = Path(__file__).resolve().parents[3]


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
    # a field whose option takes another form: the budget is a duration (`10m`), not seconds
    renamed = {"time_budget_s": "--time-budget"}
    for name in TrainConfig.model_fields:
        assert renamed.get(name, f"--{name.replace('_', '-')}") in result.stdout, name
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


def test_distill_help_lists_and_explains_every_distill_config_field():
    from training.cli.config_options import descriptions
    from training.distill.config import DistillConfig

    result = _run("distill", "--help")
    assert result.returncode == 0, result.stderr
    help_text = " ".join(result.stdout.split())
    for name, description in descriptions(DistillConfig).items():
        assert f"--{name.replace('_', '-')}" in result.stdout, name
        assert " ".join(description.split()[:4]) in help_text, name
    assert "--variants <str>" in result.stdout and "[default: distilled,static]" in help_text
    assert "--static-init-vocab <full|seen>" in result.stdout  # a Literal field shows its choices


def test_distill_options_are_checked_by_distill_config_before_any_work(tmp_path):
    common = ("distill", "--bundles", str(tmp_path / "bundles"), "--data", str(tmp_path / "data"))
    bad_variant = _run(*common, "--variants", "distilled,bogus")
    assert bad_variant.returncode == 2 and bad_variant.stderr.strip() == (
        "error: invalid option --variants: Input should be 'distilled' or 'static'"
    )
    bad_lr = _run(*common, "--lr", "-1", "--layers", "9")
    assert bad_lr.returncode == 2 and bad_lr.stderr.strip() == (
        "error: invalid option --layers: Input should be less than or equal to 6; "
        "--lr: Input should be greater than 0"
    )
    bad_choice = _run(*common, "--static-init-vocab", "all")
    assert bad_choice.returncode == 2 and "Invalid value for '--static-init-vocab'" in bad_choice.stderr
    # valid options pass validation: the command goes on to read the (missing) data and says so
    valid = _run(*common, "--variants", "static", "--static-sparse", "--max-steps", "1")
    assert valid.returncode == 2 and str(tmp_path / "data") in valid.stderr
    assert "invalid option" not in valid.stderr and "Traceback" not in valid.stderr


def test_index_and_pipeline_share_the_publishing_options():
    from training.cli.config_options import descriptions
    from training.cli.publish_options import PublishOptions

    for command in ("index", "pipeline"):
        result = _run(command, "--help")
        assert result.returncode == 0, result.stderr
        help_text = " ".join(result.stdout.split())
        for name, description in descriptions(PublishOptions).items():
            assert f"--{name.replace('_', '-')}" in result.stdout, (command, name)
            assert " ".join(description.split()[:4]) in help_text, (command, name)
        assert "--index-backend <faiss|milvus>" in result.stdout and "SEARCH_MILVUS_URI" in help_text
