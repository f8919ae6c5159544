"""Query-encoder distillation: pseudo-query pairs, the static encoder served in numpy, training that learns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contract.encoding.encoder import default_model_path
from contract.encoding.query_encoders import StaticQueryEncoder
from training.data.retrieval_data import Document, RetrievalData
from training.distill.config import DistillConfig
from training.distill.loop import student_loss as _student_loss
from training.distill.pairs import distill_pairs
from training.distill.students import sif_weighted, token_counts


def _corpus() -> dict[str, Document]:
    docs = [
        Document(
            "d1",
            "Vitamin D and bone",
            "Vitamin D raises bone density. It acts on calcium uptake in the gut.",
            {},
        ),
        Document("d2", "Statins", "Statins work. Very short.", {}),
        Document("d3", "", "No title here but a long enough sentence for a pseudo query.", {}),
    ]
    return {d.id: d for d in docs}


def test_pairs_hold_queries_titles_and_sentences_each_with_its_own_document():
    corpus = _corpus()
    train = RetrievalData(corpus, {"q1": "does vitamin d help bones"}, {"q1": {"d1": 1, "gone": 1}}, "mem")
    config = DistillConfig(title_queries=10, sentence_queries=10)
    pairs = distill_pairs(train, ["d1", "d2", "d3"], config, np.random.default_rng(0))
    by_key = dict(zip(pairs.keys, zip(pairs.texts, pairs.positives, strict=True), strict=True))
    assert by_key["q1"] == ("does vitamin d help bones", 0)  # "gone" is not in the index: skipped
    assert by_key["title:d2"] == ("Statins", 1)
    assert "title:d3" not in by_key  # no title, no title pseudo-query
    assert by_key["sentence:d1"][0] in corpus["d1"].text and by_key["sentence:d1"][1] == 0
    assert "sentence:d2" not in by_key  # its sentences are under 4 words
    assert by_key["sentence:d3"][1] == 2
    assert pairs.known["q1"] == {0}


def test_the_numpy_static_encoder_reproduces_sentence_transformers(tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    table = np.random.default_rng(0).standard_normal((tokenizer.get_vocab_size(), 16)).astype(np.float32)
    st = SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=table), Normalize()])
    st.save(str(tmp_path / "static"))
    texts = ["vitamin d and bone density", "Statins, cholesterol; and CARDIOVASCULAR risk?", "x"]
    served = StaticQueryEncoder.load(tmp_path / "static").encode(texts)
    np.testing.assert_allclose(served, st.encode(texts, normalize_embeddings=True), atol=1e-5)
    assert np.all(StaticQueryEncoder.load(tmp_path / "static").encode([""]) == 0)  # no token: zero row


def test_student_loss_is_infonce_plus_the_matching_term():
    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    docs = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    teacher = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    from training.losses.info_nce import info_nce_loss

    plain = _student_loss(q, teacher, docs, None, temperature=0.05, match_weight=0.0)
    assert plain == pytest.approx(float(info_nce_loss(q, docs, temperature=0.05)))
    matched = _student_loss(q, teacher, docs, None, temperature=0.05, match_weight=2.0)
    gap = 2.0 * float((1 - (q * teacher).sum(1)).mean())
    assert float(matched) == pytest.approx(float(plain) + gap, rel=1e-5)
    assert float(_student_loss(q, q, q, None, temperature=0.05, match_weight=1.0)) < float(plain)


def test_sentences_per_doc_draws_distinct_sentences_of_the_document_up_to_what_it_has():
    corpus = _corpus()
    train = RetrievalData(corpus, {}, {}, "mem")
    config = DistillConfig(title_queries=0, sentence_queries=10, sentences_per_doc=5)
    pairs = distill_pairs(train, ["d1", "d2", "d3"], config, np.random.default_rng(0))
    d1 = [t for k, t in zip(pairs.keys, pairs.texts, strict=True) if k == "sentence:d1"]
    assert sorted(d1) == sorted(["Vitamin D raises bone density.", "It acts on calcium uptake in the gut."])
    assert pairs.keys.count("sentence:d3") == 1  # it has one sentence long enough


@pytest.mark.parametrize("sparse", [False, True])
def test_the_static_table_gets_sparse_gradients_only_when_asked(sparse):
    from tokenizers import Tokenizer

    from training.distill.students_fit import static_model
    from training.train.step import embed

    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    table = np.random.default_rng(0).standard_normal((tokenizer.get_vocab_size(), 8)).astype(np.float32)
    model = static_model(tokenizer, table, sparse=sparse)
    embed(model, ["vitamin d and bone density"]).sum().backward()
    (weight,) = [p for p in model.parameters() if p.requires_grad]
    assert weight.grad is not None and weight.grad.is_sparse == sparse


def test_fit_student_calls_on_step_after_every_step_and_learns():
    from tokenizers import Tokenizer

    from training.distill.loop import DistillTargets, Student, fit_student
    from training.distill.pairs import DistillPairs
    from training.distill.students_fit import static_model

    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    rng = np.random.default_rng(0)
    table = rng.standard_normal((tokenizer.get_vocab_size(), 8)).astype(np.float32)
    model = static_model(tokenizer, table, sparse=False)
    params = [p for p in model.parameters() if p.requires_grad]
    texts = ["vitamin d bone", "statins cholesterol", "insulin glucose", "tumour growth"]
    docs = rng.standard_normal((4, 8)).astype(np.float32)  # (N, D), one positive per text
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    pairs = DistillPairs(texts, [0, 1, 2, 3], ["a", "b", "c", "d"], {k: {i} for i, k in enumerate("abcd")})
    seen: list[int] = []
    info = fit_student(
        Student(model, params, torch.optim.Adam(params, lr=0.05), epochs=20),
        # the teacher's query vectors: the positives themselves
        DistillTargets(pairs, docs, docs.copy(), [[] for _ in texts]),
        temperature=0.05,
        config=DistillConfig(batch_size=4),
        rng=rng,
        on_step=seen.append,
    )
    assert seen == list(range(1, info["steps"] + 1)) and info["steps"] == 20
    assert info["loss_last"] < info["loss_first"]


def test_token_counts_and_sif_weights_match_hand_counts():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()))
    texts = ["protein protein binding", "binding"]
    counts = token_counts(tokenizer, texts)
    protein, binding = tokenizer.convert_tokens_to_ids(["protein", "binding"])
    assert counts.shape == (tokenizer.vocab_size,) and counts.sum() == 4
    assert counts[protein] == 2 and counts[binding] == 2
    table = np.ones((tokenizer.vocab_size, 3), dtype=np.float32)
    weighted = sif_weighted(table, counts, sif_a=0.5)  # a / (a + p): p = 0.5 for both, 0 for the rest
    assert np.allclose(weighted[protein], 0.5) and np.allclose(weighted[binding], 0.5)
    assert np.allclose(np.delete(weighted, [protein, binding], axis=0), 1.0)


def test_pca_reduce_at_full_rank_reconstructs_the_table_and_keeps_zero_rows_zero():
    from training.distill.students import pca_reduce

    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 6)).astype(np.float32)
    table[[3, 7]] = 0.0  # tokens never computed (static_init_vocab "seen")
    reduced, components = pca_reduce(table, 6)
    live = np.abs(table).sum(1) > 0
    mean = table[live].mean(0)
    np.testing.assert_allclose(reduced[live] @ components + mean, table[live], atol=1e-5)
    assert np.all(reduced[[3, 7]] == 0)
    small, axes = pca_reduce(table, 2)  # the top axes: the most variance of any 2-d projection
    assert small.shape == (50, 2) and axes.shape == (2, 6)
    np.testing.assert_allclose(axes @ axes.T, np.eye(2), atol=1e-5)
    assert small[live].var(0).sum() >= (table[live] - mean)[:, :2].var(0).sum()


def test_zipf_counts_fall_with_the_vocabulary_rank():
    from training.distill.students import zipf_counts

    counts = zipf_counts(5)
    np.testing.assert_allclose(counts, 1 / np.arange(2, 7))
    weighted = sif_weighted(np.ones((5, 1), dtype=np.float32), counts, sif_a=1e-3)
    assert np.all(np.diff(weighted[:, 0]) > 0)  # frequent (low id) tokens weigh least


def test_a_pca_student_is_served_folded_into_one_table_with_the_same_vectors(tmp_path):
    from tokenizers import Tokenizer

    from training.distill.students_fit import folded_static, static_model

    tokenizer = Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))
    rng = np.random.default_rng(0)
    table = rng.standard_normal((tokenizer.get_vocab_size(), 4)).astype(np.float32)
    components = rng.standard_normal((4, 16)).astype(np.float32)
    model = static_model(tokenizer, table, sparse=False, components=components)
    with torch.no_grad():
        model[1].linear.bias.copy_(torch.from_numpy(rng.standard_normal(16).astype(np.float32)))
    texts = ["vitamin d and bone density", "statins", "a b c d e f g"]
    folded_static(model, model[0].tokenizer).save(str(tmp_path / "static"))
    served = StaticQueryEncoder.load(tmp_path / "static").encode(texts)
    np.testing.assert_allclose(served, model.encode(texts, normalize_embeddings=True), atol=1e-5)


def test_span_pseudo_queries_are_word_spans_of_their_document_as_long_as_training_queries():
    corpus = _corpus()
    train = RetrievalData(corpus, {"q1": "two words", "q2": "three word query"}, {"q1": {"d1": 1}}, "mem")
    config = DistillConfig(title_queries=0, sentence_queries=0, span_queries=10, spans_per_doc=4)
    pairs = distill_pairs(train, ["d1", "d2", "d3"], config, np.random.default_rng(0))
    spans = [
        (t, p)
        for k, t, p in zip(pairs.keys, pairs.texts, pairs.positives, strict=True)
        if k.startswith("span:")
    ]
    assert len(spans) == 12  # 4 spans from each of the 3 documents
    ids = ["d1", "d2", "d3"]
    for text, pos in spans:
        assert text in " ".join(corpus[ids[pos]].text.split()) and len(text.split()) in (2, 3)
    base = distill_pairs(train, ids, config.model_copy(update={"span_queries": 0}), np.random.default_rng(0))
    assert pairs.texts[: len(base.texts)] == base.texts  # spans come after, the rest unchanged
