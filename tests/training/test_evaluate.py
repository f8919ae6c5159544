"""Evaluation: exact search against a full argsort, trec_eval metrics against hand computations."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

import training.eval.evaluate as evaluate_module
from contract.encoding.encoder import Similarity, document_text
from contract.errors import DataError
from training.data.beir import load_beir
from training.data.query_sample import subset
from training.data.retrieval_data import Document, RetrievalData
from training.eval.evaluate import encode_corpus, evaluate, exact_search, trec_metrics


# -- hand-written reference metrics (the standard definitions, as in BEIR's README) ----------------------
def hand_ndcg10(ranking: list[str], rel: dict[str, int]) -> float:
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranking[:10]))
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg


def hand_mrr10(ranking: list[str], rel: dict[str, int]) -> float:
    return next((1.0 / (i + 1) for i, d in enumerate(ranking[:10]) if rel.get(d, 0) > 0), 0.0)


def hand_recall(ranking: list[str], rel: dict[str, int], k: int) -> float:
    relevant = {d for d, g in rel.items() if g > 0}
    return len(relevant & set(ranking[:k])) / len(relevant)


def as_run(rankings: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    return {q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in rankings.items()}


# -- exact search ------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 7, 50, 80])
def test_exact_search_equals_full_argsort(k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    q = rng.normal(size=(23, 8)).astype(np.float32)
    d = rng.normal(size=(50, 8)).astype(np.float32)
    monkeypatch.setattr(evaluate_module, "_CHUNK_CELLS", 50 * 4)  # 4 queries a chunk: chunking is exercised
    scores, idx = exact_search(q, d, k)
    full = q @ d.T
    expected = np.argsort(-full, axis=1, kind="stable")[:, : min(k, 50)]
    assert idx.shape == (23, min(k, 50)) and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, expected)
    # float32 dot products summed in another order (chunked BLAS vs one matmul) differ by a few ulps of
    # the largest score, so a relative tolerance alone fails on scores near zero
    np.testing.assert_allclose(
        scores, np.take_along_axis(full, expected, axis=1), rtol=1e-6, atol=1e-6 * np.abs(full).max()
    )


def test_exact_search_learned_similarity_and_ties() -> None:
    rng = np.random.default_rng(1)
    q = rng.normal(size=(9, 4)).astype(np.float32)
    d = rng.normal(size=(30, 4)).astype(np.float32)
    lam = np.array([1.0, 5.0, 10.0, 20.0], dtype=np.float32)

    def aninfonce(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return -0.5 * (((a[:, None, :] - b[None, :, :]) ** 2) * lam).sum(-1)  # (n, m)

    _, idx = exact_search(q, d, 10, similarity=aninfonce)
    np.testing.assert_array_equal(idx, np.argsort(-aninfonce(q, d), axis=1, kind="stable")[:, :10])
    # exact ties are ordered by document index
    _, tied = exact_search(np.ones((1, 2), np.float32), np.ones((6, 2), np.float32), 4)
    assert tied.tolist() == [[0, 1, 2, 3]]
    empty_scores, empty_idx = exact_search(q[:0], d, 5)
    assert empty_scores.shape == (0, 5) and empty_idx.shape == (0, 5)


# -- metrics -----------------------------------------------------------------------------------------
def test_trec_metrics_match_hand_computation_on_a_built_ranking() -> None:
    qrels = {
        "a": {"d3": 1},  # found at rank 3
        "b": {"d1": 2, "d5": 1, "d9": 1},  # graded: gains are the grades
        "c": {"x": 1},  # first relevant at rank 11: MRR@10 = 0, recall@100 = 1
        "d": {f"r{i}": 1 for i in range(12)},  # 12 relevant: ideal DCG over 10
    }
    rankings = {
        "a": ["d1", "d2", "d3", "d4"],
        "b": ["d5", "d2", "d1", "d7"],
        "c": [f"n{i}" for i in range(10)] + ["x"],
        "d": ["n0", *[f"r{i}" for i in range(11)]],
    }
    got = trec_metrics(qrels, as_run(rankings))
    assert got["ndcg@10"]["a"] == pytest.approx(0.5)  # 1/log2(4)
    assert got["mrr@10"]["a"] == pytest.approx(1 / 3)
    assert got["recall@1"]["b"] == pytest.approx(1 / 3)
    assert got["ndcg@10"]["b"] == pytest.approx(
        (1 + 2 / math.log2(4)) / (2 + 1 / math.log2(3) + 1 / math.log2(4))
    )
    assert got["mrr@10"]["c"] == 0.0 and got["recall@10"]["c"] == 0.0 and got["recall@100"]["c"] == 1.0
    assert got["recall@10"]["d"] == pytest.approx(9 / 12)
    for q, ranking in rankings.items():
        assert got["ndcg@10"][q] == pytest.approx(hand_ndcg10(ranking, qrels[q]))
        assert got["mrr@10"][q] == pytest.approx(hand_mrr10(ranking, qrels[q]))
        for k in (1, 10, 100):
            assert got[f"recall@{k}"][q] == pytest.approx(hand_recall(ranking, qrels[q], k))


def test_trec_metrics_match_hand_computation_on_random_rankings() -> None:
    rng = np.random.default_rng(2)
    docs = [f"doc{i}" for i in range(150)]
    qrels, rankings = {}, {}
    for qi in range(60):
        n_rel = int(rng.integers(1, 15))
        qrels[f"q{qi}"] = {docs[j]: int(rng.integers(1, 3)) for j in rng.choice(150, n_rel, replace=False)}
        rankings[f"q{qi}"] = [docs[j] for j in rng.permutation(150)[:120]]
    got = trec_metrics(qrels, as_run(rankings))
    for q, ranking in rankings.items():
        assert got["ndcg@10"][q] == pytest.approx(hand_ndcg10(ranking, qrels[q]))
        assert got["mrr@10"][q] == pytest.approx(hand_mrr10(ranking, qrels[q]))
        for k in (1, 10, 100):
            assert got[f"recall@{k}"][q] == pytest.approx(hand_recall(ranking, qrels[q], k))
    assert np.mean(list(got["ndcg@10"].values())) > 0  # the random draw did hit some relevant documents


# -- evaluate() on given embeddings (the ranking is fixed by construction) ---------------------------
def _fixed_ranking_data() -> tuple[RetrievalData, np.ndarray, np.ndarray, dict[str, list[str]]]:
    """Docs are one-hot rows, so query row = its score for every document: the ranking is chosen."""
    rng = np.random.default_rng(3)
    n_docs = 120
    corpus = {f"d{i}": Document(f"d{i}", "", f"text {i}", {}) for i in range(n_docs)}
    queries = {f"q{i}": f"query {i}" for i in range(25)}
    qrels = {
        q: {f"d{j}": 1 for j in rng.choice(n_docs, int(rng.integers(1, 4)), replace=False)} for q in queries
    }
    scores = rng.permuted(np.tile(np.linspace(1.0, 0.0, n_docs, dtype=np.float32), (25, 1)), axis=1)
    rankings = {q: [f"d{j}" for j in np.argsort(-scores[i])] for i, q in enumerate(queries)}
    return RetrievalData(corpus, queries, qrels, "mem"), np.eye(n_docs, dtype=np.float32), scores, rankings


def test_evaluate_given_embeddings_equals_hand_metrics(shared_encoder) -> None:
    data, doc_emb, query_emb, rankings = _fixed_ranking_data()
    result = evaluate(
        shared_encoder, data, doc_embeddings=doc_emb, query_embeddings=query_emb, show_progress=False
    )
    assert set(result.metrics) == {"ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100"}
    assert (result.n_queries, result.n_docs) == (25, 120)
    expected = {
        "ndcg@10": np.mean([hand_ndcg10(rankings[q], data.qrels[q]) for q in data.queries]),
        "mrr@10": np.mean([hand_mrr10(rankings[q], data.qrels[q]) for q in data.queries]),
        **{
            f"recall@{k}": np.mean([hand_recall(rankings[q], data.qrels[q], k) for q in data.queries])
            for k in (1, 10, 100)
        },
    }
    for name, value in expected.items():
        assert result.metrics[name] == pytest.approx(value), name
    assert list(result.per_query["ndcg@10"]) == list(data.queries)
    assert result.per_query_ndcg.mean() == pytest.approx(result.metrics["ndcg@10"])
    assert result.doc_embeddings is doc_emb and result.doc_ids == list(data.corpus)
    with pytest.raises(ValueError, match="doc_embeddings has 119 rows"):
        evaluate(shared_encoder, data, doc_embeddings=doc_emb[:-1], query_embeddings=query_emb)
    with pytest.raises(DataError, match="no queries"):
        evaluate(shared_encoder, RetrievalData(data.corpus, {}, {}, "mem"), doc_embeddings=doc_emb)


def test_evaluate_uses_the_encoders_learned_similarity(shared_encoder) -> None:
    """An AnInfoNCE encoder ranks by -1/2 (u-v)^T diag(Λ) (u-v), not by the inner product."""
    rng = np.random.default_rng(4)
    dim = shared_encoder.dim
    doc_emb = rng.normal(size=(80, dim)).astype(np.float32)
    doc_emb /= np.linalg.norm(doc_emb, axis=1, keepdims=True)
    query_emb = rng.normal(size=(10, dim)).astype(np.float32)
    query_emb /= np.linalg.norm(query_emb, axis=1, keepdims=True)
    lam = rng.uniform(0.1, 40.0, size=dim)
    aninfonce = copy.copy(shared_encoder)  # shallow: shares the model, owns its similarity
    aninfonce.similarity = Similarity(metric="aninfonce", temperature=None, lam=lam.tolist())
    learned = -0.5 * ((((query_emb[:, None, :] - doc_emb[None]) ** 2) * lam).sum(-1))  # (10, 80)
    top1_learned = learned.argmax(1)
    top1_ip = (query_emb @ doc_emb.T).argmax(1)
    assert (top1_learned != top1_ip).any()  # the two similarities disagree on this draw
    corpus = {f"d{i}": Document(f"d{i}", "", "t", {}) for i in range(80)}
    queries = {f"q{i}": "q" for i in range(10)}
    data = RetrievalData(corpus, queries, {f"q{i}": {f"d{top1_learned[i]}": 1} for i in range(10)}, "mem")
    kw = {"doc_embeddings": doc_emb, "query_embeddings": query_emb, "show_progress": False}
    assert evaluate(aninfonce, data, **kw).metrics["recall@1"] == 1.0
    assert evaluate(shared_encoder, data, **kw).metrics["recall@1"] < 1.0


# -- the real encoder --------------------------------------------------------------------------------
def test_real_encoder_finds_obvious_answers_and_reuses_corpus_encoding(shared_encoder) -> None:
    texts = {
        "paris": ("Paris", "Paris is the capital and largest city of France."),
        "tokyo": ("Tokyo", "Tokyo is the capital of Japan."),
        "photo": ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into sugar."),
        "python": ("Python", "Python is a programming language with dynamic typing."),
        "violin": ("Violin", "The violin is a string instrument played with a bow."),
    }
    corpus = {i: Document(i, t, x, {}) for i, (t, x) in texts.items()}
    queries = {
        "q1": "What is the capital of France?",
        "q2": "How do plants make sugar from light?",
        "q3": "Which instrument has strings and a bow?",
    }
    qrels = {"q1": {"paris": 1}, "q2": {"photo": 1}, "q3": {"violin": 1}}
    data = RetrievalData(corpus, queries, qrels, "mem")
    ids, emb = encode_corpus(shared_encoder, corpus, batch_size=8, show_progress=False)
    assert ids == list(corpus) and emb.shape == (5, shared_encoder.dim) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    direct = shared_encoder.encode([document_text(d.title, d.text) for d in corpus.values()], kind="document")
    np.testing.assert_allclose(emb, direct, atol=1e-5)
    first = evaluate(shared_encoder, data, show_progress=False)
    assert first.metrics["recall@1"] == 1.0 and first.metrics["ndcg@10"] == pytest.approx(1.0)
    again = evaluate(shared_encoder, data, doc_embeddings=first.doc_embeddings, show_progress=False)
    assert again.metrics == first.metrics


def test_the_corpus_encode_hands_the_encoder_chunks_longest_first(
    demo_dataset: Path, shared_encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full retrain's encode (no checkpoint) never gives the encoder more than CHECKPOINT_DOCS texts at
    once: one call on the whole corpus held the whole corpus's tokens (bench/index/corpus_encode_scale.py)."""
    corpus = dict(list(load_beir(demo_dataset, "test").corpus.items())[:40])
    texts = [document_text(d.title, d.text) for d in corpus.values()]
    direct = shared_encoder.encode(texts, kind="document")  # (40, dim) in one call
    real_encode = shared_encoder.encode
    calls: list[list[str]] = []

    def spy(chunk, **kw):
        calls.append(list(chunk))
        return real_encode(chunk, **kw)

    monkeypatch.setattr(evaluate_module, "CHECKPOINT_DOCS", 16)
    monkeypatch.setattr(shared_encoder, "encode", spy)
    ids, emb = encode_corpus(shared_encoder, corpus, show_progress=False)
    assert ids == list(corpus) and [len(c) for c in calls] == [16, 16, 8]
    lengths = [len(t) for chunk in calls for t in chunk]
    assert lengths == sorted(lengths, reverse=True)  # batches pad as in one call on the whole corpus
    np.testing.assert_allclose(emb, direct, atol=1e-5)  # rows back in corpus order


def test_a_real_slice_beats_random(demo_dataset: Path, shared_encoder) -> None:
    data = subset(load_beir(demo_dataset, "test"), n_queries=30, n_distractors=120, seed=0)
    result = evaluate(shared_encoder, data, batch_size=32, show_progress=False)
    assert all(0.0 <= v <= 1.0 for v in result.metrics.values())
    assert result.metrics["recall@100"] >= result.metrics["recall@10"] >= result.metrics["recall@1"]
    # random ranking of 150 docs with one relevant per query gives nDCG@10 around 0.03 (base model: 0.86);
    # the same check on scifact's numbers is bench/training/scifact_checks.py
    assert result.metrics["ndcg@10"] > 0.4


@pytest.mark.parametrize("metric", ["cosine", "aninfonce"])
def test_search_metrics_through_an_index_equal_exact_search_and_hand_metrics(metric: str) -> None:
    """nDCG through an index (ONNX quality, distilled encoders): the index's answer, the exact answer by the
    model's similarity and the hand-computed nDCG@10 / recall@10 of the brute-force ranking agree."""
    import faiss

    from contract.index.vector_index import IndexInfo, VectorIndex
    from training.eval.search_metrics import search_metrics

    rng = np.random.default_rng(3)
    docs = rng.standard_normal((60, 8)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((6, 8)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    doc_ids = [f"d{i}" for i in range(60)]
    qids = [f"q{i}" for i in range(6)]
    qrels = {q: {f"d{(7 * i) % 60}": 1, f"d{(7 * i + 3) % 60}": 2} for i, q in enumerate(qids)}
    lam = [float(x) for x in rng.uniform(2.0, 20.0, 8)] if metric == "aninfonce" else None
    sim = Similarity(metric=metric, temperature=None if lam else 0.05, lam=lam)
    flat = faiss.IndexFlat(8, faiss.METRIC_L2 if sim.index_metric == "l2" else faiss.METRIC_INNER_PRODUCT)
    flat.add(sim.to_index_space(docs))
    info = IndexInfo(
        factory="Flat", kind="flat", metric=sim.index_metric, ntotal=60, dim=8, bytes_per_vector=32
    )
    through_index = search_metrics(sim, queries, qids, qrels, doc_ids, index=VectorIndex(flat, info))
    exact = search_metrics(sim, queries, qids, qrels, doc_ids, doc_embeddings=docs)
    order = np.argsort(-sim.scores(queries, docs), axis=1, kind="stable")  # (6, 60) brute force
    rankings = {q: [doc_ids[j] for j in order[i]] for i, q in enumerate(qids)}
    hand = {
        "ndcg@10": round(float(np.mean([hand_ndcg10(rankings[q], qrels[q]) for q in qids])), 6),
        "recall@10": round(float(np.mean([hand_recall(rankings[q], qrels[q], 10) for q in qids])), 6),
    }
    assert through_index == exact
    assert exact == pytest.approx(hand, abs=2e-6)
    assert search_metrics(sim, queries[:0], [], qrels, doc_ids, doc_embeddings=docs) == {
        "ndcg@10": 0.0,
        "recall@10": 0.0,
    }
