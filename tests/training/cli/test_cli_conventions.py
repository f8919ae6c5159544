"""CLI conventions through real subprocesses: --version, options with a fixed set of values show and check
it, --json output of jobs list/status. (Pipeline / index --json, --quiet and --no-onnx run for real in
tests/training/publish/test_cards.py; bundles in test_bundles_cli.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.cli.choices import INDEX_KINDS
from training.export.index_factory import KINDS

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "training", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", **env},
    )


def test_version():
    from importlib import metadata

    done = _cli("--version")
    assert (
        done.returncode == 0 and done.stdout.strip() == f"infonce-search {metadata.version('infonce-search')}"
    )


def test_choices_are_the_index_builders_own():
    assert INDEX_KINDS == KINDS


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (
            ("index", "--help"),
            ["--index <auto|flat|hnsw|ivf|ivfpq>", "--log-level <debug|info|warning|error>"],
        ),
        (("pipeline", "--help"), ["--index <auto|flat|hnsw|ivf|ivfpq>", "--loss <infonce|aninfonce>"]),
        (("train", "--help"), ["--loss <infonce|aninfonce>", "--device <auto|cpu|cuda>"]),
        (("jobs", "submit", "--help"), ["--type <retrain|reindex>"]),
        (("worker", "--help"), ["--device <auto|cpu|cuda>", "--log-format <text|json>"]),
    ],
)
def test_help_shows_the_choices(args, shown):
    done = _cli(*args)
    assert done.returncode == 0, done.stderr
    for text in shown:
        assert text in done.stdout, (text, done.stdout)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("index", "--model", "m", "--data", "d", "--bundles", "b", "--index", "annoy"), "--index"),
        (("train", "--data", "d", "--out", "o", "--loss", "triplet"), "--loss"),
        (("train", "--data", "d", "--out", "o", "--device", "tpu"), "--device"),
        (("report", "--data", "d", "--log-level", "loud"), "--log-level"),
        (("jobs", "submit", "--type", "rebuild", "--dataset", "x"), "--type"),
        (("worker", "--device", "tpu"), "--device"),
    ],
)
def test_a_value_outside_the_choices_is_refused_naming_them(args, option):
    done = _cli(*args)
    assert done.returncode == 2
    assert f"Invalid value for '{option}'" in done.stderr and "is not one of" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("interval", "said"),
    [
        ("11", "--progress-interval-s 11: must be above 0 and at most the heartbeat timeout (30s) / 3"),
        ("0", "invalid option --progress-interval-s: Input should be greater than 0"),
    ],
)
def test_a_progress_interval_the_heartbeat_timeout_cannot_hold_is_refused_before_the_worker_starts(
    tmp_path, interval, said
):
    # three beats must fit in the timeout, or the worker's own sweeper would fail its live jobs as dead
    queue = f"sqlite:///{tmp_path / 'jobs.db'}"
    args = ("worker", "--queue", queue, "--heartbeat-timeout", "30", "--progress-interval-s", interval)
    done = _cli(*args)
    assert done.returncode == 2
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "jobs.db").exists()  # refused before it started


def test_log_level_accepts_any_case(tmp_path):
    done = _cli(
        "demo-data",
        "--out",
        str(tmp_path / "demo"),
        "--docs",
        "4",
        "--test-queries",
        "1",
        "--log-level",
        "warning",
    )
    assert done.returncode == 0, done.stderr
    assert "INFO" not in done.stderr  # the project's INFO lines are off at warning


def test_jobs_list_and_status_json(tmp_path):
    data = tmp_path / "data" / "mini"
    data.mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    queue = f"sqlite:///{tmp_path / 'jobs.db'}"
    common = ("--queue", queue)
    submitted = _cli(
        "jobs",
        "submit",
        "--type",
        "reindex",
        "--dataset",
        "mini",
        "--data-root",
        str(tmp_path / "data"),
        *common,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    listed = json.loads(_cli("jobs", "list", "--json", *common).stdout)
    assert [j["id"] for j in listed["jobs"]] == [job_id] and listed["jobs"][0]["state"] == "queued"
    assert listed["workers"] == []
    one = json.loads(_cli("jobs", "status", job_id, *common).stdout)
    assert one["id"] == job_id and one["type"] == "reindex"
