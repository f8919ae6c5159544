"""The judgments as a retrain reads them, from a real judgment store: positives by query, a seeded held-out
slice, shown-above hard negatives that are never a judged positive, documents resolved from the mutation log,
and the training split extended (include) or replaced (only)."""

from __future__ import annotations

import pytest

from contract.errors import JobOptionsInvalid
from contract.feedback.store import FeedbackStore, Judgment
from contract.mutations.log import MutationLog, NewDocument
from training.data.retrieval_data import Document, RetrievalData
from training.feedback.pairs import query_id, read_slices, with_feedback
from training.train.examples import with_shown_negatives


def _corpus(n: int) -> dict[str, Document]:
    return {f"d{i}": Document(f"d{i}", f"title {i}", f"text {i}", {}) for i in range(n)}


def _store(tmp_path, judgments: list[Judgment]) -> None:
    store = FeedbackStore(tmp_path, max_rows=1000, retention_s=1e9)
    store.append(judgments)
    store.close()


def test_positives_split_by_query_with_shown_above_negatives(tmp_path):
    corpus = _corpus(20)
    rows = [
        Judgment(f"query {i}", f"d{i}", 3, "v1", "dense", 3, above=(f"d{i + 1}", f"d{i + 2}"))
        for i in range(10)
    ]
    rows.append(Judgment("query 0", "d1", 2, "v1", "dense", 1))  # d1 is relevant for query 0 after all
    rows.append(Judgment("query 1", "d9", 0, "v1", "dense", 1))  # not relevant: no pair
    rows.append(Judgment("query 2", "gone", 3))  # a document no source holds
    _store(tmp_path, rows)
    slices = read_slices(tmp_path, corpus, seed=0, holdout=0.2)
    assert len(slices.heldout_queries) == 2 and len(slices.train_queries) == 8
    assert not set(slices.heldout_queries) & set(slices.train_queries)
    assert slices.n_judgments == 12 and slices.n_unresolved == 1
    again = read_slices(tmp_path, corpus, seed=0, holdout=0.2)
    assert again.heldout_queries == slices.heldout_queries  # seeded
    q0 = query_id("query 0")
    qrels = slices.train_qrels | slices.heldout_qrels
    assert qrels[q0] == {"d0": 1, "d1": 1}
    assert q0 in slices.train_queries  # (seed 0 holds out two others)
    assert slices.negatives[q0] == ["d2"]  # d1 was shown above, but is judged relevant for query 0
    for qid, negatives in slices.negatives.items():
        assert qid in slices.train_queries and not set(negatives) & set(qrels[qid])


def test_documents_written_through_the_api_are_resolved_from_the_mutation_log(tmp_path):
    MutationLog(tmp_path).append_upserts([NewDocument("new", "a title", "a new text", {})], None, None)
    _store(tmp_path, [Judgment("q", "new", 1), Judgment("r", "d0", 1)])
    slices = read_slices(tmp_path, _corpus(3), seed=0, holdout=0.0)
    assert slices.docs["new"].text == "a new text" and slices.n_unresolved == 0
    train = RetrievalData(corpus=_corpus(3), queries={"t": "t"}, qrels={"t": {"d1": 1}}, source="x")
    included = with_feedback(train, slices, "include")
    assert set(included.queries) == {"t", query_id("q"), query_id("r")} and "new" in included.corpus
    only = with_feedback(train, slices, "only")
    assert set(only.queries) == {query_id("q"), query_id("r")}
    with pytest.raises(JobOptionsInvalid):
        with_feedback(train, read_slices(tmp_path / "none", _corpus(3), seed=0, holdout=0.2), "only")


def test_shown_negatives_come_first_and_never_a_known_positive():
    class P:
        def __init__(self, qid):
            self.query_id = qid

    pairs = [P("a"), P("b")]
    position = {"x": 0, "y": 1, "z": 2}
    got = with_shown_negatives([[2], [1]], pairs, {"a": ["y", "x"]}, position, {"a": {0}, "b": set()})
    assert got == [[1, 2], [1]]
