"""DocStore: round trip, metadata filters against a Python oracle, injection safety, concurrent readers."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from contract.errors import BundleDamaged, BundleInvalid
from contract.index.docstore import DocStore, FilterError, write_docstore
from training.data.retrieval_data import Document

DOCS = [
    Document(
        id=f"d{i}",
        title=f"title {i}",
        text=f"text {i} é",
        metadata={
            "year": 2000 + i % 25,
            "lang": ["en", "de", "fr"][i % 3],
            "score": i / 10,
            "src": {"name": "pubmed" if i % 2 else "arxiv"},
            "open": i % 4 == 0,
        },
    )
    for i in range(100)
]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> DocStore:
    path = write_docstore(tmp_path_factory.mktemp("ds") / "docs.sqlite", DOCS)
    return DocStore(path)


def expected(pred) -> list[int]:
    return [i for i, d in enumerate(DOCS) if pred(d.metadata)]


def test_get_returns_documents_in_requested_order(store):
    assert len(store) == 100 and store.ids()[:3] == ["d0", "d1", "d2"]
    got = store.get([42, 3, 42], include=("title", "metadata"))
    assert [g["id"] for g in got] == ["d42", "d3", "d42"]
    assert got[0] == {"position": 42, "id": "d42", "title": "title 42", "metadata": DOCS[42].metadata}
    assert store.get([7])[0]["text"] == "text 7 é"
    assert store.get(np.arange(0, 100, dtype=np.int64))[-1]["id"] == "d99"
    with pytest.raises(BundleDamaged, match="position"):  # served: the replica falls back (issue 27)
        store.get([100])


@pytest.mark.parametrize(
    ("flt", "pred"),
    [
        ({"year": 2003}, lambda m: m["year"] == 2003),
        ({"lang": {"in": ["de", "fr"]}}, lambda m: m["lang"] in ("de", "fr")),
        ({"year": {"gte": 2010, "lt": 2015}}, lambda m: 2010 <= m["year"] < 2015),
        ({"score": {"gt": 2.5, "lte": 5}}, lambda m: 2.5 < m["score"] <= 5),
        ({"lang": "en", "year": {"lte": 2005}}, lambda m: m["lang"] == "en" and m["year"] <= 2005),
        ({"src.name": {"eq": "pubmed"}}, lambda m: m["src"]["name"] == "pubmed"),
        ({"open": True}, lambda m: m["open"]),
        ({"missing": 1}, lambda m: False),
        ({}, lambda m: True),
    ],
)
def test_filters_match_python_oracle(store, flt, pred):
    got = store.filter_positions(flt)
    assert got.dtype == np.int64
    assert got.tolist() == expected(pred)


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ({"year": {"near": 2003}}, "unknown operator 'near'"),
        ({"year') OR 1=1 --": 1}, "filter field"),
        ({"year": {"gte": "2003"}}, "needs a number"),
        ({"lang": {"in": []}}, "'in' needs a list"),
        ({"lang": {"in": [["en"]]}}, "string, number or boolean"),
        ({"lang": {}}, "empty condition"),
        ({"lang": None}, "string, number or boolean"),
    ],
)
def test_bad_filters_are_clear_errors(store, flt, message):
    with pytest.raises(FilterError, match=message) as info:
        store.filter_positions(flt)
    assert info.value.code == "bad_filter"


def test_values_are_bound_not_interpolated(store):
    assert store.filter_positions({"lang": "en' OR '1'='1"}).tolist() == []
    assert len(store) == 100  # nothing was executed from the value


def test_read_only_and_safe_for_concurrent_readers(store):
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        store._con().execute("DELETE FROM docs")

    def work(i: int) -> tuple[str, int]:
        return store.get([i])[0]["id"], len(store.filter_positions({"year": {"gte": 2000 + i % 25}}))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(100)))
    assert [r[0] for r in results] == [f"d{i}" for i in range(100)]
    assert results[0][1] == 100


def test_missing_or_corrupt_file_is_bundle_invalid(tmp_path):
    with pytest.raises(BundleInvalid, match="missing"):
        DocStore(tmp_path / "none.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"garbage" * 100)
    with pytest.raises(BundleInvalid, match="not a valid document store"):
        DocStore(bad)
