"""The CLI's rough edges a first user met (issue 32, item 6), each run as a user runs it: real
subprocesses of `python -m training`, the real packaged encoder, a real SQLite job queue.

- `index` checks its inputs before loading the model: a missing data folder or model folder is one line
  at once, with no model loaded;
- a broken JSON line names its line and the column an editor shows (not "column 1" of a phantom line 2);
- a corpus line with an unknown field (`"txt"`) is refused, naming the file, the line, the field and the
  field it probably meant;
- `jobs list` has a header row, and a job cancelled while queued reads "not started", not "queued";
- progress bars only on a terminal: with stderr a pipe (a log, CI) no bar is drawn between the log lines,
  on a pseudo-terminal they still are.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

from contract.encoding.encoder import default_model_path

REPO = Path(__file__).resolve().parents[3]
BAR = "encoding documents"  # index's own tqdm bar
ENV = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "training", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def _beir(folder: Path, corpus: str) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(corpus)
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "how do queues hand items over"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


GOOD = (
    '{"_id": "d1", "title": "queue", "text": "A queue hands items between threads."}\n'
    '{"_id": "d2", "title": "heap", "text": "A heap keeps the smallest item first."}\n'
)


def _index(data: Path, bundles: Path, *extra: str, model: Path | None = None) -> list[str]:
    return [
        "index", "--model", str(model or default_model_path()), "--data", str(data),
        "--bundles", str(bundles), "--index", "flat", "--no-onnx", *extra,
    ]  # fmt: skip


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_index_refuses_a_missing_data_folder_before_loading_the_model(tmp_path):
    missing = tmp_path / "no-such-data"
    done = _cli(*_index(missing, tmp_path / "bundles"))
    line = _one_error_line(done)
    assert line.startswith("error: ") and str(missing) in line
    assert "loaded encoder" not in done.stderr and "Loading weights" not in done.stderr  # no model loaded


def test_index_refuses_a_missing_model_folder_naming_it(tmp_path):
    data = _beir(tmp_path / "data", GOOD)
    missing = tmp_path / "no-such-run"
    line = _one_error_line(_cli(*_index(data, tmp_path / "bundles", model=missing)))
    assert str(missing) in line and "no such model folder" in line


def test_a_broken_json_line_names_its_line_and_true_column(tmp_path):
    data = _beir(tmp_path / "data", GOOD + '{"_id": "d3", "text": "unfinished"\n')
    line = _one_error_line(_cli(*_index(data, tmp_path / "bundles")))
    # the third line is 34 characters long: the missing brace is expected at column 35, its end
    assert "corpus.jsonl:3: invalid JSON: Expecting ',' delimiter (column 35, the end of the line)" in line

    data2 = _beir(tmp_path / "data2", '{"_id": "d1" "text": "no comma"}\n')
    line = _one_error_line(_cli(*_index(data2, tmp_path / "bundles")))
    assert "corpus.jsonl:1: invalid JSON: Expecting ',' delimiter (column 14)" in line


def test_an_unknown_corpus_field_is_refused_naming_line_field_and_the_likely_one(tmp_path):
    data = _beir(tmp_path / "data", GOOD + '{"_id": "d3", "title": "typo", "txt": "the text went here"}\n')
    line = _one_error_line(_cli(*_index(data, tmp_path / "bundles")))
    assert "corpus.jsonl:3: field 'txt' is not a field of a document (did you mean 'text'?)" in line
    assert "'metadata'" in line  # where other values may go
    # documented fields, metadata included, are accepted (the same corpus without the typo indexes)
    meta = GOOD + '{"_id": "d3", "text": "with metadata", "metadata": {"source": "docs"}}\n'
    done = _cli(*_index(_beir(tmp_path / "ok", meta), tmp_path / "bundles", "--quiet", "--json"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["live"] is True


def test_jobs_list_has_a_header_and_a_job_cancelled_while_queued_never_reads_queued(tmp_path):
    (tmp_path / "data" / "mini").mkdir(parents=True)
    (tmp_path / "data" / "mini" / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    common = ("--queue", f"sqlite:///{tmp_path / 'jobs.db'}")
    assert _cli("jobs", "list", *common).stdout.splitlines()[0] == "no jobs yet"
    submitted = _cli(
        "jobs", "submit", "--type", "reindex", "--dataset", "mini", "--data-root", str(tmp_path / "data"), *common
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    waiting = _cli("jobs", "list", *common).stdout.splitlines()
    assert waiting[0].split() == ["ID", "TYPE", "COLLECTION", "STATE", "DATASET", "PHASE", "STEP", "DETAIL"]
    assert waiting[1].split()[:6] == [job_id, "reindex", "default", "queued", "mini", "queued"]
    # the columns line up: each value starts where its header does
    assert waiting[1].index("reindex") == waiting[0].index("TYPE")
    assert waiting[1].index("mini") == waiting[0].index("DATASET")

    assert _cli("jobs", "cancel", job_id, *common).stdout.strip() == f"{job_id} cancelled"
    listed = _cli("jobs", "list", *common).stdout.splitlines()
    row = listed[1]
    assert row.split()[3] == "cancelled" and "not started" in row and "queued" not in row
    assert row.index("not started") == listed[0].index("PHASE")
    record = json.loads(_cli("jobs", "status", job_id, *common).stdout)
    assert record["state"] == "cancelled" and record["progress"]["phase"] == "not started"


def test_progress_bars_only_on_a_terminal(tmp_path):
    data = _beir(tmp_path / "data", GOOD)
    piped = _cli(*_index(data, tmp_path / "bundles-piped"))
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert "INFO training." in piped.stderr  # the log lines are there
    assert BAR not in piped.stderr and "Loading weights" not in piped.stderr and "it/s]" not in piped.stderr

    # the same command with stderr on a pseudo-terminal: the bars are drawn
    main, sub = pty.openpty()
    # a terminal 120 columns wide (a fresh pty is 0 x 0, where tqdm draws an empty bar)
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:  # read while it runs: a full pty buffer would block the command
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    cmd = [sys.executable, "-m", "training", *_index(data, tmp_path / "bundles-tty")]
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=sub, timeout=180, env=ENV)
    os.close(sub)
    reader.join(timeout=10)
    os.close(main)
    shown = b"".join(chunks).decode(errors="replace")
    assert done.returncode == 0, shown[-2000:]
    assert BAR in shown and "INFO training." in shown


def test_train_applies_the_job_options_bounds(tmp_path):
    """The CLI's options are TrainConfig's fields, so the bounds a job's options get (issue 43, item 5) hold
    here too: refused before any data or model is read."""
    done = _cli(
        "train", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--epochs", "1000000000"
    )
    line = _one_error_line(done)
    assert "epochs" in line and "1000" in line, line
