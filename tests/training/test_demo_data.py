"""The demo dataset: built from the running Python's standard library, BEIR format, deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.encoding.encoder import document_text
from training.data.beir import load_beir
from training.data.demo_data import build_demo_dataset, harvest

FILES = ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv", "README.md")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_dataset(tmp_path_factory.mktemp("demo") / "pydocs", n_docs=400, n_test=100, seed=3)


def test_beir_format_loads_with_the_readers(demo: Path) -> None:
    train, test = load_beir(demo, "train"), load_beir(demo, "test")
    assert len(train.corpus) == 400
    assert len(train.queries) == 300 and len(test.queries) == 100
    assert all(len(rel) == 1 for rel in train.qrels.values())
    assert all(doc.title and doc.text for doc in train.corpus.values())
    header = (demo / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "query-id\tcorpus-id\tscore"
    readme = (demo / "README.md").read_text(encoding="utf-8")
    assert "400 documents" in readme and "100 queries" in readme


def test_splits_are_disjoint_and_cover_every_document(demo: Path) -> None:
    train, test = load_beir(demo, "train"), load_beir(demo, "test")
    assert not set(train.queries) & set(test.queries)
    train_docs = {d for rel in train.qrels.values() for d in rel}
    test_docs = {d for rel in test.qrels.values() for d in rel}
    assert not train_docs & test_docs
    assert train_docs | test_docs == set(train.corpus)


def test_no_query_appears_in_its_document(demo: Path) -> None:
    data = load_beir(demo, "train")
    queries = {
        json.loads(line)["_id"]: json.loads(line)["text"]
        for line in (demo / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    }
    qrels = {**data.qrels, **load_beir(demo, "test").qrels}
    for qid, rel in qrels.items():
        (doc_id,) = rel
        doc = data.corpus[doc_id]
        assert queries[qid].lower() not in document_text(doc.title, doc.text).lower()


def test_two_builds_are_byte_identical_and_the_seed_matters(demo: Path, tmp_path: Path) -> None:
    again = build_demo_dataset(tmp_path / "again", n_docs=400, n_test=100, seed=3)
    for name in FILES:
        assert (again / name).read_bytes() == (demo / name).read_bytes(), name
    other = build_demo_dataset(tmp_path / "other", n_docs=400, n_test=100, seed=4)
    assert (other / "qrels/test.tsv").read_bytes() != (demo / "qrels/test.tsv").read_bytes()


def test_rebuild_replaces_the_folder_and_leaves_no_partial(demo: Path, tmp_path: Path) -> None:
    out = build_demo_dataset(tmp_path / "d", n_docs=150, n_test=50)
    build_demo_dataset(out, n_docs=120, n_test=20)
    assert len(load_beir(out, "test").corpus) == 120
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


def test_harvest_parses_without_importing(tmp_path: Path) -> None:
    """A fake library folder: private names, tests and too-short docstrings are skipped."""
    (tmp_path / "test").mkdir()
    body = "This paragraph explains the behaviour in enough words to be a useful searchable document text."
    source = f'''
def spam():
    """Return the spam of the day.

    {body}
    """
def _hidden():
    """Return something private here.

    {body}
    """
def short():
    """Too short.

    {body}
    """
raise SystemExit("importing this file would end the interpreter")
'''
    (tmp_path / "mod.py").write_text(source, encoding="utf-8")
    (tmp_path / "test" / "test_mod.py").write_text(source, encoding="utf-8")
    pairs = harvest(tmp_path)
    assert [(p.name, p.summary) for p in pairs] == [("mod.spam", "Return the spam of the day.")]
    assert pairs[0].body == body


def test_too_many_test_queries_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n_test=50 leaves no training queries"):
        build_demo_dataset(tmp_path / "x", n_docs=50, n_test=50)


def test_the_demo_data_command_builds_the_default_dataset(tmp_path: Path) -> None:
    """What `make demo` runs when no DATA is given: the defaults, identical to the library call."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "training", "demo-data", "--out", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lib = build_demo_dataset(tmp_path / "lib")
    for name in FILES:
        assert (tmp_path / "cli" / name).read_bytes() == (lib / name).read_bytes(), name
    bad = subprocess.run(
        [sys.executable, "-m", "training", "demo-data", "--out", str(tmp_path / "x"), "--docs", "10",
         "--test-queries", "10"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "n_test=10 leaves no training queries" in bad.stderr
    assert "Traceback" not in bad.stderr
