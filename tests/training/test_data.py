"""Dataset readers: good files load exactly, every kind of bad line is named by file, line and field."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from contract.encoding.encoder import document_text
from contract.errors import DataError
from training.data.beir import load_beir, load_corpus, load_qrels, load_queries
from training.data.pairs_file import load_pairs_file, pairs_as_retrieval
from training.data.query_sample import subset
from training.data.retrieval_data import Pair, training_pairs
from training.data.split import load_split

CORPUS = [
    {"_id": "d1", "title": "Alpha", "text": "first doc", "metadata": {"year": 2001}},
    {"_id": "d2", "title": "", "text": "second doc"},
    {"_id": "d3", "title": "Title only", "text": ""},
    {"_id": "d4", "title": "Delta", "text": "fourth doc"},
]
QUERIES = [
    {"_id": "q1", "text": "query one"},
    {"_id": "q2", "text": "query two"},
    {"_id": "q3", "text": "q3"},
]
QRELS = "query-id\tcorpus-id\tscore\nq2\td4\t1\nq1\td2\t1\nq1\td1\t2\nq3\td3\t0\n"


def jsonl(rows: list[object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_beir(
    root: Path,
    *,
    corpus: str | bytes | None = None,
    queries: str | bytes | None = None,
    qrels: str | bytes | None = None,
    split: str = "test",
) -> Path:
    """A small BEIR folder; any file can be replaced by raw content."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    for name, content, default in (
        ("corpus.jsonl", corpus, jsonl(CORPUS)),
        ("queries.jsonl", queries, jsonl(QUERIES)),
        (f"qrels/{split}.tsv", qrels, QRELS),
    ):
        data = default if content is None else content
        (root / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def expect_error(call, path: Path, *, line: int | None = None, field: str | None = None) -> DataError:
    with pytest.raises(DataError) as info:
        call()
    err = info.value
    msg = str(err)
    assert err.path == str(path) and str(path) in msg, msg
    assert err.line == line, msg
    if line is not None:
        assert f"{path}:{line}:" in msg, msg
    assert err.field == field, msg
    if field is not None:
        assert f"'{field}'" in msg, msg
    assert "Traceback" not in msg
    return err


# -- good input --------------------------------------------------------------------------------------
def test_load_beir_reads_split(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path), "test")
    assert list(data.corpus) == ["d1", "d2", "d3", "d4"]  # file order
    assert data.corpus["d1"].metadata == {"year": 2001}
    assert data.corpus["d2"].metadata == {}
    assert data.corpus["d3"].title == "Title only" and data.corpus["d3"].text == ""
    # q3 has only a score-0 judgement: not relevant, so not a query of this split
    assert data.queries == {"q1": "query one", "q2": "query two"}
    assert data.qrels == {"q2": {"d4": 1}, "q1": {"d2": 1, "d1": 2}}
    assert data.source == str(tmp_path)


def test_id_key_variants_bom_crlf_and_blank_lines(tmp_path: Path) -> None:
    corpus = '\ufeff{"id": "a", "title": "T", "text": "x"}\r\n\r\n{"_id": "b", "text": "y"}\r\n'
    queries = '{"id": "q", "text": "hello"}\n'
    root = make_beir(tmp_path, corpus=corpus, queries=queries, qrels="q\ta\t1\r\nq\tb\t1\r\n")  # no header
    data = load_beir(root, "test")
    assert list(data.corpus) == ["a", "b"]
    assert data.qrels == {"q": {"a": 1, "b": 1}}


def test_training_pairs_one_per_relevant_doc_sorted(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path), "test")
    pairs = training_pairs(data)
    assert [(p.query_id, p.positive_id) for p in pairs] == [("q1", "d1"), ("q1", "d2"), ("q2", "d4")]
    assert pairs[0] == Pair(
        query="query one", positive=document_text("Alpha", "first doc"), query_id="q1", positive_id="d1"
    )
    assert pairs[1].positive == "second doc"


def test_subset_is_seeded_and_keeps_relevant_docs() -> None:
    rng = random.Random(1)
    from training.data.retrieval_data import Document, RetrievalData

    corpus = {f"d{i}": Document(f"d{i}", "", f"text {i}", {}) for i in range(200)}
    queries = {f"q{i}": f"query {i}" for i in range(40)}
    qrels = {q: {f"d{j}": 1 for j in rng.sample(range(200), 2)} for q in queries}
    data = RetrievalData(corpus, queries, qrels, "mem")
    a = subset(data, n_queries=10, n_distractors=30, seed=3)
    b = subset(data, n_queries=10, n_distractors=30, seed=3)
    c = subset(data, n_queries=10, n_distractors=30, seed=4)
    assert a == b and a != c
    assert len(a.queries) == 10 and set(a.qrels) == set(a.queries)
    relevant = {d for rel in a.qrels.values() for d in rel}
    assert relevant <= set(a.corpus)
    assert len(a.corpus) == len(relevant) + 30
    assert list(a.corpus) == [d for d in corpus if d in a.corpus]  # original order
    everything = subset(data, n_queries=1000, n_distractors=10_000, seed=0)
    assert everything.corpus.keys() == corpus.keys() and everything.queries == queries


def test_pairs_file_and_pairs_as_retrieval(tmp_path: Path) -> None:
    rows = [
        {"query": f"question {i}", "positive": f"answer {i}", "negatives": [f"wrong {i}", "shared wrong"]}
        for i in range(20)
    ]
    rows.append({"query": "question 0", "positive": "second answer 0"})  # same query, two positives
    path = tmp_path / "pairs.jsonl"
    path.write_text(jsonl(rows))
    pairs = load_pairs_file(path)
    assert (
        len(pairs) == 21 and pairs[0].negatives == ("wrong 0", "shared wrong") and pairs[-1].negatives == ()
    )
    train, test = pairs_as_retrieval(pairs, holdout_fraction=0.2, seed=0)
    again_train, again_test = pairs_as_retrieval(pairs, holdout_fraction=0.2, seed=0)
    assert (train, test) == (again_train, again_test)
    assert len(test.queries) == 4 and len(train.queries) == 16
    assert not set(train.queries) & set(test.queries)
    assert train.corpus is test.corpus
    texts = sorted(d.text for d in train.corpus.values())
    assert len(texts) == 20 + 1 + 20 + 1  # answers, second answer, per-pair wrongs, the shared wrong
    q0 = next(q for q, t in {**train.queries, **test.queries}.items() if t == "question 0")
    both = {**train.qrels, **test.qrels}[q0]
    assert sorted(train.corpus[d].text for d in both) == ["answer 0", "second answer 0"]
    # the evaluator-facing view matches the file's (query, positive) pairs exactly
    all_pairs = {(p.query, p.positive) for p in training_pairs(train) + training_pairs(test)}
    assert all_pairs == {(p.query, p.positive) for p in pairs}
    from_file = load_split(path, "test", holdout_fraction=0.2)
    assert (from_file.queries, from_file.qrels, from_file.source) == (test.queries, test.qrels, str(path))


# -- bad input: JSONL ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line2", "field", "fragment"),
    [
        ('{"_id": "x", "text": ', None, "invalid JSON"),
        pytest.param("[" * 100_000 + "]" * 100_000, None, "nested too deeply", id="deep-nesting"),
        ('["x", "y"]', None, "got an array"),
        ('{"title": "t", "text": "body"}', "_id", "missing id"),
        ('{"_id": "", "text": "body"}', "_id", "empty"),
        ('{"id": 7, "text": "body"}', "id", "must be a string"),
        ('{"_id": "x", "text": 3}', "text", "must be a string"),
        ('{"_id": "x", "title": ["t"], "text": "b"}', "title", "must be a string"),
        ('{"_id": "x", "title": " ", "text": ""}', "text", "needs one"),
        ('{"_id": "x", "text": "b", "metadata": [1]}', "metadata", "must be a JSON object"),
        ('{"_id": "d1", "text": "again"}', "_id", "lines 1 and 2"),
    ],
)
def test_corpus_errors_name_file_line_field(
    tmp_path: Path, line2: str, field: str | None, fragment: str
) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "d1", "text": "fine"}\n' + line2 + "\n")
    err = expect_error(lambda: load_corpus(path), path, line=2, field=field)
    assert fragment in str(err)


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n')
    err = expect_error(lambda: load_corpus(path), path, line=2)
    assert "invalid UTF-8" in str(err)


@pytest.mark.parametrize(
    ("line3", "field"),
    [
        ('{"_id": "q9"}', "text"),
        ('{"_id": "q9", "text": "  "}', "text"),
        ('{"_id": "q1", "text": "dup"}', "_id"),
    ],
)
def test_query_errors(tmp_path: Path, line3: str, field: str) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text('{"_id": "q1", "text": "a"}\n\n' + line3 + "\n")  # blank line 2 still counts
    expect_error(lambda: load_queries(path), path, line=3, field=field)


def test_empty_corpus(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n")
    err = expect_error(lambda: load_corpus(path), path)
    assert "empty" in str(err)


# -- bad input: qrels ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("row", "field", "fragment"),
    [
        ("q1\td1", None, "found 2"),
        ("q1 d1 1", None, "found 1"),
        ("q1\t0\td1\t1", None, "found 4"),
        ("q1\td1\tyes", "score", "integer"),
        ("q1\td1\t1.5", "score", "integer"),
        ("q404\td1\t1", "query-id", "unknown query 'q404'"),
        ("q1\td404\t1", "corpus-id", "unknown document 'd404'"),
        ("\td1\t1", "query-id", "empty"),
        ("q2\td4\t1", None, "lines 2 and 3"),
    ],
)
def test_qrels_errors(tmp_path: Path, row: str, field: str | None, fragment: str) -> None:
    root = make_beir(tmp_path, qrels=f"query-id\tcorpus-id\tscore\nq2\td4\t1\n{row}\n")
    path = root / "qrels" / "test.tsv"
    err = expect_error(lambda: load_beir(root, "test"), path, line=3, field=field)
    assert fragment in str(err)


def test_load_qrels_without_id_checks(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_text("a\tx\t1\na\ty\t0\nb\tz\t3\n")
    assert load_qrels(path) == {"a": {"x": 1}, "b": {"z": 3}}
    path.write_text("qid\tdoc_id\trelevance\na\tx\t1\n")  # another tool's header names
    assert load_qrels(path) == {"a": {"x": 1}}
    path.write_text("a\tx\t1.0\n")  # a number on line 1 is data, not a header
    expect_error(lambda: load_qrels(path), path, line=1, field="score")


def test_split_without_relevant_pairs(tmp_path: Path) -> None:
    root = make_beir(tmp_path, qrels="query-id\tcorpus-id\tscore\nq1\td1\t0\n")
    err = expect_error(lambda: load_beir(root, "test"), root / "qrels" / "test.tsv")
    assert "no relevant pairs" in str(err)


# -- bad input: missing files --------------------------------------------------------------------------
def test_missing_folder_and_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    err = expect_error(lambda: load_beir(missing, "test"), missing)
    assert "not found" in str(err) and "corpus.jsonl" in str(err)

    root = make_beir(tmp_path / "a")
    (root / "queries.jsonl").unlink()
    err = expect_error(lambda: load_beir(root, "test"), root / "queries.jsonl")
    assert "not found" in str(err)

    root = make_beir(tmp_path / "b")
    (root / "qrels" / "dev.tsv").write_text(QRELS)
    err = expect_error(lambda: load_beir(root, "train"), root / "qrels" / "train.tsv")
    assert "'train'" in str(err) and "available splits: dev, test" in str(err)

    root = make_beir(tmp_path / "c")
    (root / "qrels" / "test.tsv").unlink()
    err = expect_error(lambda: load_beir(root, "test"), root / "qrels" / "test.tsv")
    assert "has no .tsv files" in str(err)


# -- bad input: pairs files ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line2", "field"),
    [
        ('{"positive": "p"}', "query"),
        ('{"query": "q", "positive": ""}', "positive"),
        ('{"query": "q", "positive": 5}', "positive"),
        ('{"query": "q", "positive": "p", "negatives": "n"}', "negatives"),
        ('{"query": "q", "positive": "p", "negatives": ["ok", 3]}', "negatives[1]"),
        ('{"query": "q", "positive": "p", "negatives": ["ok", " "]}', "negatives[1]"),
    ],
)
def test_pairs_file_errors(tmp_path: Path, line2: str, field: str) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"query": "a", "positive": "b"}\n' + line2 + "\n")
    expect_error(lambda: load_pairs_file(path), path, line=2, field=field)


def test_pairs_file_empty_or_too_small(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("")
    expect_error(lambda: load_pairs_file(path), path)
    path.write_text('{"query": "a", "positive": "b"}\n')
    expect_error(lambda: load_split(path, "train"), path)  # one query cannot be split into train and test
    expect_error(lambda: load_split(path, "dev"), path)


def test_random_corruption_only_ever_raises_data_error(tmp_path: Path) -> None:
    """Flip bytes in a valid folder: every failure must be a DataError, never a library exception."""
    good = {
        "corpus.jsonl": jsonl(CORPUS).encode(),
        "queries.jsonl": jsonl(QUERIES).encode(),
        "qrels/test.tsv": QRELS.encode(),
    }
    rng = random.Random(0)
    failures = 0
    for trial in range(150):
        name = rng.choice(sorted(good))
        blob = bytearray(good[name])
        for _ in range(rng.randint(1, 3)):
            blob[rng.randrange(len(blob))] = rng.choice(b'\xff\x80"{}[]\t\n:,0a ')
        root = make_beir(tmp_path / str(trial), **{name.split(".")[0].split("/")[0]: bytes(blob)})
        try:
            load_beir(root, "test")
        except DataError as err:
            failures += 1
            assert str(root) in str(err)
    assert failures > 50  # most corruptions must be caught, not silently accepted
