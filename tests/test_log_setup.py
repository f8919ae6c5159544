"""Logging policy of every process: root at WARNING, the project's loggers at --log-level, optional JSON.

Real processes: the worker command as an operator starts it, and the API factory reading SEARCH_LOG_FORMAT
from its environment. The pipeline test (tests/training/publish/test_cards.py) checks a real ONNX export stays free
of the quantizer's `INFO root:` lines and faiss's loader line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def test_library_info_stays_quiet_and_ours_follows_the_level():
    code = (
        "import logging; from contract.log_setup import configure_logging; configure_logging('INFO'); "
        "logging.info('quantizer chatter'); logging.getLogger('faiss.loader').info('Could not load AVX2'); "
        "logging.getLogger('training.indexing').info('ours at info'); "
        "logging.getLogger('faiss.loader').warning('a real library warning')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "ours at info" in done.stderr and "a real library warning" in done.stderr
    assert "quantizer chatter" not in done.stderr and "AVX2" not in done.stderr
    assert "INFO root:" not in done.stderr


def test_a_library_that_sets_its_own_logger_to_debug_stays_quiet_and_contract_logs_at_the_level():
    code = (
        "import logging; from contract.log_setup import configure_logging; configure_logging('INFO'); "
        "import bm25s; "  # bm25s sets its logger to DEBUG at import (after configure_logging ran)
        "logging.getLogger('bm25s').debug('Building index from tokens'); "
        "logging.getLogger('contract.bundles.bundle').info('contract at info'); "
        "logging.getLogger('bm25s').warning('bm25s warning')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "Building index" not in done.stderr
    assert "contract at info" in done.stderr and "bm25s warning" in done.stderr


def test_worker_logs_json_lines_when_asked(tmp_path):
    cmd = [sys.executable, "-m", "training", "worker", "--queue", f"sqlite:///{tmp_path / 'jobs.db'}"]
    proc = subprocess.Popen(
        cmd,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(SEARCH_LOG_FORMAT="json"),
        cwd=REPO,
    )
    try:
        assert proc.stderr is not None
        deadline, lines = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "consuming" in line:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    ours = [r for r in records if r["logger"] == "training.jobs.worker"]
    assert ours and "consuming" in ours[0]["message"] and ours[0]["level"] == "INFO"
    assert {"time", "level", "logger", "message"} <= records[0].keys()


def test_api_log_format_setting_reaches_the_handler(tmp_path):
    code = (
        "import logging; from app.main import create_app; create_app(); "
        "logging.getLogger('app.store').info('hello from the api'); "
        "logging.getLogger('uvicorn.error').debug('not ours')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(SEARCH_LOG_FORMAT="json", SEARCH_BUNDLES_DIR=str(tmp_path / "b")),
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert json.loads(line) | {"time": None} == {
        "time": None,
        "level": "INFO",
        "logger": "app.store",
        "message": "hello from the api",
    }
