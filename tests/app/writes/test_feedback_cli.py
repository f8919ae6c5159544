"""`python -m training feedback FILE --url URL` (issue 41 item 1) as a user runs it: a subprocess sending
a JSONL or TSV file of judgments to the real app served over real HTTP; a malformed line is refused
before anything is sent and a judgment the server refuses is named by its file and line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.main import create_app
from contract.feedback.store import FeedbackStore
from tests.app.conftest import make_settings, publish
from tests.servers import serve_app

REPO = Path(__file__).resolve().parents[3]
KEY = "test-key"  # make_settings' SEARCH_API_KEY


@pytest.fixture(scope="module")
def served(tmp_path_factory, staged) -> Iterator[tuple[str, Path]]:
    bundles = tmp_path_factory.mktemp("feedback-cli") / "bundles"
    publish(staged["A"], bundles)
    with serve_app(create_app(make_settings(bundles))) as url:
        yield url, bundles


def _cli(*args: str, key: str | None = KEY) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    if key is not None:
        env["SEARCH_API_KEY"] = key  # the variable the option reads, as an operator's shell has it
    return subprocess.run(
        [sys.executable, "-m", "training", "feedback", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _stored(bundles: Path) -> int:
    return FeedbackStore(bundles, max_rows=10**6, retention_s=1e9).count()


def _search(url: str, query: str) -> tuple[str, list[str]]:
    import httpx

    result = httpx.post(f"{url}/search", json={"query": query, "top_k": 3}, timeout=60).json()["results"][0]
    return result["search_id"], [h["id"] for h in result["hits"]]


def test_a_jsonl_and_a_tsv_file_are_stored_with_their_search_ids(served, tmp_path):
    url, bundles = served
    sid, ids = _search(url, "how to sort a list")
    jsonl = tmp_path / "judged.jsonl"
    lines = [
        {"query": "how to sort a list", "document_id": ids[0], "relevant": True, "search_id": sid},
        {"query": "how to sort a list", "document_id": ids[1], "relevant": 0},
    ]
    jsonl.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    before = _stored(bundles)
    done = _cli(str(jsonl), "--url", url)
    assert done.returncode == 0, done.stderr
    assert f"stored 2 judgments from {jsonl}" in done.stdout
    rows = FeedbackStore(bundles, max_rows=10**6, retention_s=1e9).judgments()[before:]
    assert [(r.doc_id, r.grade, r.rank) for r in rows] == [(ids[0], 3, 1), (ids[1], 0, None)]

    tsv = tmp_path / "judged.tsv"
    tsv.write_text(f"query\tdocument_id\trelevant\nsort a list\t{ids[2]}\t2\nsort a list\t{ids[0]}\tfalse\n")
    done = _cli(str(tsv), "--url", url, "--batch", "1")  # two requests of one
    assert done.returncode == 0, done.stderr
    assert _stored(bundles) == before + 4
    assert [r.grade for r in FeedbackStore(bundles, max_rows=10**6, retention_s=1e9).judgments()[-2:]] == [
        2,
        0,
    ]


def test_a_malformed_line_is_named_and_nothing_is_sent(served, tmp_path):
    url, bundles = served
    before = _stored(bundles)
    path = tmp_path / "typo.jsonl"
    path.write_text(
        '{"query": "q", "document_id": "d", "relevant": true}\n{"query": "q", "document_id": "d", "relevnt": 1}\n'
    )
    done = _cli(str(path), "--url", url)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"error: {path}:2: field 'relevnt' is not a field of a judgment (did you mean 'relevant'?); "
        "it has 'query', 'document_id', 'relevant', 'search_id'"
    )
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("q\td\tyes\n")
    done = _cli(str(tsv), "--url", url)
    assert done.returncode == 2
    assert f"{tsv}:1: field 'relevant' must be true, false or a grade 0-3, got 'yes'" in done.stderr
    assert _stored(bundles) == before


def test_a_judgment_the_server_refuses_is_named_by_its_line(served, tmp_path):
    url, bundles = served
    _, ids = _search(url, "how to sort a list")
    before = _stored(bundles)
    path = tmp_path / "unknown.jsonl"
    good = {"query": "q", "document_id": ids[0], "relevant": True}
    path.write_text(
        "\n".join(json.dumps(x) for x in [good, good, dict(good, document_id="no-such-doc")]) + "\n"
    )
    done = _cli(str(path), "--url", url)
    assert done.returncode == 2, done.stdout
    message = done.stderr.strip()
    assert message.startswith(f"error: {path}:3: field 'document_id' no document 'no-such-doc'"), message
    assert "404" in message and "nothing stored" in message
    assert _stored(bundles) == before  # the batch is all or none

    wrong = _cli(str(path), "--url", url, key="not-the-key")
    assert wrong.returncode == 2 and "403" in wrong.stderr and "wrong" in wrong.stderr
    none = _cli(str(path), "--url", url, key=None)
    assert none.returncode == 2 and "--key" in none.stderr and "SEARCH_API_KEY" in none.stderr
