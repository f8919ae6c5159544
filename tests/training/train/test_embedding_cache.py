"""The on-disk embedding cache: a hit skips the encoder, any change misses, a bad file is recomputed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.data.retrieval_data import Document
from training.eval.embedding_cache import EmbeddingCache, corpus_fingerprint, model_fingerprint
from training.eval.evaluate import encode_corpus

CORPUS = {
    f"d{i}": Document(f"d{i}", f"title {i}", f"document number {i} about topic {i % 3}", {}) for i in range(6)
}


class CountingEncoder:
    """The real encoder, counting its calls (the spy sits at the edge; the vectors are real)."""

    def __init__(self, encoder):
        self.inner = encoder
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, texts, **kwargs):
        self.calls += 1
        return self.inner.encode(texts, **kwargs)


@pytest.fixture()
def spy(shared_encoder) -> CountingEncoder:
    return CountingEncoder(shared_encoder)


def test_a_hit_does_not_call_the_encoder_and_returns_the_same_rows(spy, tmp_path):
    cache = EmbeddingCache(tmp_path)
    _, first = encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    assert spy.calls == 1
    _, again = encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    assert spy.calls == 1  # answered from disk
    assert isinstance(again, np.memmap) and not again.flags.writeable  # memory-mapped, read-only
    np.testing.assert_array_equal(np.asarray(again), np.asarray(first))
    _, plain = encode_corpus(spy, CORPUS, show_progress=False)
    np.testing.assert_allclose(np.asarray(again), plain, atol=1e-6)  # what the encoder itself gives


def test_a_changed_corpus_misses(spy, tmp_path):
    cache = EmbeddingCache(tmp_path)
    encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    changed = dict(CORPUS)
    changed["d0"] = Document("d0", "title 0", "a different text", {})
    _, emb = encode_corpus(spy, changed, show_progress=False, cache=cache)
    assert spy.calls == 2
    assert emb.shape == (6, spy.dim)
    reordered = dict(reversed(list(CORPUS.items())))
    encode_corpus(spy, reordered, show_progress=False, cache=cache)
    assert spy.calls == 3  # rows follow the corpus order, so another order is another entry
    assert corpus_fingerprint(["ab", "c"]) != corpus_fingerprint(["a", "bc"])


def test_a_changed_model_or_max_length_misses(base_encoder, tmp_path):
    cache = EmbeddingCache(tmp_path)
    spy = CountingEncoder(base_encoder)
    encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    before = model_fingerprint(base_encoder)
    with torch.no_grad():  # one weight moves a little, as a training step would
        next(base_encoder.model.parameters()).view(-1)[0] += 1e-3
    assert model_fingerprint(base_encoder) != before
    encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    assert spy.calls == 2
    base_encoder.model.max_seq_length = 64
    encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    assert spy.calls == 3
    encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    assert spy.calls == 3


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "bad metadata"])
def test_a_corrupt_entry_is_recomputed_and_rewritten(spy, tmp_path, damage):
    cache = EmbeddingCache(tmp_path)
    _, good = encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    good = np.array(good)
    (npy,) = tmp_path.glob("*.npy")
    if damage == "flip a byte":
        raw = bytearray(npy.read_bytes())
        raw[-5] ^= 0xFF  # inside the last vector
        npy.write_bytes(bytes(raw))
    elif damage == "truncate":
        npy.write_bytes(npy.read_bytes()[:100])
    else:
        npy.with_suffix(".json").write_text("{not json")
    _, again = encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    assert spy.calls == 2  # not trusted: encoded again
    np.testing.assert_allclose(np.asarray(again), good, atol=1e-6)
    encode_corpus(spy, CORPUS, show_progress=False, cache=cache)
    assert spy.calls == 2  # and the rewritten entry is good


def test_prune_keeps_the_most_recently_used_entries(tmp_path):
    cache = EmbeddingCache(tmp_path, max_entries=2)
    rows = np.ones((2, 3), dtype=np.float32)
    for key in ("a", "b", "c"):
        cache.put(key, rows)
    assert sorted(p.stem for p in tmp_path.glob("*.npy")) == ["b", "c"]
    assert cache.get("a") is None and cache.get("c") is not None
