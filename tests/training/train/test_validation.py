"""The validation carve: seeded, disjoint from what is trained on, every query on exactly one side."""

from __future__ import annotations

import numpy as np

from training.data.pseudo_pairs import sentence_pairs
from training.data.retrieval_data import Document, RetrievalData
from training.data.validation_carve import carve_validation


def _data(n_queries: int) -> RetrievalData:
    corpus = {f"d{i}": Document(f"d{i}", f"title {i}", f"text {i}", {}) for i in range(5)}
    queries = {f"q{i}": f"query {i}" for i in range(n_queries)}
    qrels = {f"q{i}": {f"d{i % 5}": 1} for i in range(n_queries)}
    return RetrievalData(corpus=corpus, queries=queries, qrels=qrels, source="mem")


def test_carve_is_seeded_disjoint_and_complete():
    data = _data(50)
    fit, val = carve_validation(data, 0.2, seed=3)
    assert len(val.queries) == 10 and len(fit.queries) == 40
    assert set(fit.queries).isdisjoint(val.queries) and set(fit.queries) | set(val.queries) == set(
        data.queries
    )
    assert set(val.qrels) == set(val.queries) and set(fit.qrels) == set(fit.queries)
    assert fit.corpus is data.corpus and val.corpus is data.corpus
    again = carve_validation(data, 0.2, seed=3)[1]
    other = carve_validation(data, 0.2, seed=4)[1]
    assert set(again.queries) == set(val.queries) and set(other.queries) != set(val.queries)


def test_carve_edges():
    fit, val = carve_validation(_data(10), 0.0, seed=0)
    assert len(fit.queries) == 10 and val.queries == {}
    fit, val = carve_validation(_data(1), 0.5, seed=0)
    assert len(fit.queries) == 1 and val.queries == {}
    fit, val = carve_validation(_data(2), 0.01, seed=0)  # at least one each side
    assert len(fit.queries) == 1 and len(val.queries) == 1


def test_queries_sharing_a_relevant_document_stay_on_one_side():
    # chains: q0-q1 share d0, q1-q2 share d1 (so q0..q2 are one group); q3..q11 have a document each
    corpus = {f"d{i}": Document(f"d{i}", f"title {i}", f"text {i}", {}) for i in range(12)}
    qrels = {"q0": {"d0": 1}, "q1": {"d0": 1, "d1": 1}, "q2": {"d1": 1}}
    qrels.update({f"q{i}": {f"d{i}": 1} for i in range(3, 12)})
    data = RetrievalData(corpus, {q: q for q in qrels}, qrels, source="mem")
    for seed in range(20):
        fit, val = carve_validation(data, 0.25, seed=seed)
        assert len(val.queries) == 3 and len(fit.queries) == 9  # the group of three, or three singles
        fit_docs = {d for rel in fit.qrels.values() for d in rel}
        assert not any(d in fit_docs for rel in val.qrels.values() for d in rel)


def test_one_group_falls_back_to_single_queries(caplog):
    data = RetrievalData(
        {"d0": Document("d0", "t", "x", {})},
        {f"q{i}": "q" for i in range(10)},
        {f"q{i}": {"d0": 1} for i in range(10)},
        "mem",
    )
    fit, val = carve_validation(data, 0.2, seed=0)
    assert len(val.queries) == 2 and len(fit.queries) == 8
    assert "holding out single queries" in caplog.text


def test_sentence_pairs_hold_the_sentence_out_of_the_positive():
    text = "Cells divide when the growth signal is present. The second sentence is long enough here. End."
    corpus = {"a": Document("a", "Title A", text, {})}
    data = RetrievalData(corpus=corpus, queries={}, qrels={}, source="mem")
    (pair,) = sentence_pairs(data, 1, np.random.default_rng(0))
    assert pair.query in text and pair.query not in pair.positive and pair.positive.startswith("Title A")
    assert pair.query_id == "sentence:a" and pair.positive_id == "a"
    assert sentence_pairs(data, 0, np.random.default_rng(0)) == []
