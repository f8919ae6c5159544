"""BM25 (bm25s, built by training.hybrid.bm25_build) against a brute-force implementation of the formula."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from contract.index.lexical_index import K1, B, LexicalIndex, analyze, top_k
from training.hybrid.bm25_build import build_lexical_index

WORDS = [
    "cell",
    "cells",
    "protein",
    "gene",
    "mice",
    "mouse",
    "cancer",
    "tumour",
    "growth",
    "signal",
    "blood",
    "brain",
    "virus",
    "dose",
]


def _corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 12)))) for _ in range(n)]
    docs[3] = "The and of"  # only stop words: no terms at all
    return docs


def brute_force(docs: list[str], query: str) -> np.ndarray:
    """Lucene BM25 by the book, one document at a time."""
    terms = [analyze(d) for d in docs]
    n = len(docs)
    avgdl = sum(len(t) for t in terms) / n
    df = Counter(w for t in terms for w in set(t))
    out = np.zeros(n)
    for w in dict.fromkeys(analyze(query)):
        if w not in df:
            continue
        idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
        for i, t in enumerate(terms):
            tf = t.count(w)
            out[i] += idf * tf / (tf + K1 * (1 - B + B * len(t) / avgdl))
    return out


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> tuple[LexicalIndex, list[str]]:
    docs = _corpus(40, seed=1)
    folder = build_lexical_index(docs, tmp_path_factory.mktemp("lex") / "lexical")
    return LexicalIndex.load(folder), docs


QUERIES = [
    "cancer cells in mice",
    "The growth of a tumour",
    "virus virus dose",
    "nothing here zzz",
    "Signals!",
]


@pytest.mark.parametrize("query", QUERIES)
def test_scores_match_brute_force(index, query):
    lex, docs = index
    np.testing.assert_allclose(lex.scores(query), brute_force(docs, query), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("query", QUERIES)
def test_search_is_the_brute_force_top_k_with_and_without_a_filter(index, query):
    lex, docs = index
    expected = brute_force(docs, query)
    allowed = np.arange(0, len(docs), 3)  # every third document, as a metadata filter would give
    for k, mask in ((5, None), (len(docs), None), (4, allowed)):
        ((pos, sc),) = lex.search([query], k, allowed=mask)
        keep = [i for i in range(len(docs)) if expected[i] > 0 and (mask is None or i in set(mask.tolist()))]
        want = sorted(expected[keep], reverse=True)[:k]  # the top-k scores (ties may swap documents)
        assert set(pos.tolist()) <= set(keep) and len(set(pos.tolist())) == len(pos) == len(want)
        np.testing.assert_allclose(sc, want, rtol=1e-5)
        np.testing.assert_allclose(sc, expected[pos], rtol=1e-5)


def test_analysis_stems_lowercases_and_drops_stop_words():
    assert analyze("The Running mice AND a Cell's cells") == ["run", "mice", "cell", "cell"]


def test_a_mismatched_analyzer_is_refused(index, tmp_path):
    import json
    import shutil

    lex, _ = index
    folder = tmp_path / "lexical"
    build_lexical_index(["a b c"], folder)  # no term of two letters: the degenerate empty vocabulary
    assert LexicalIndex.load(folder).search(["a b c"], 3)[0][0].size == 0
    params = json.loads((folder / "lexical.json").read_text())
    (folder / "lexical.json").write_text(json.dumps({**params, "analyzer": "other"}))
    with pytest.raises(ValueError, match="analyzer"):
        LexicalIndex.load(folder)
    shutil.rmtree(folder)


def test_a_batch_is_searched_as_each_text_alone_with_the_same_float32_scores(index):
    lex, docs = index
    excluded = np.array([0, 5, 9])
    together = lex.search(QUERIES, 6, excluded=excluded)
    for query, (pos, sc) in zip(QUERIES, together, strict=True):
        dense = lex.scores(query)  # bm25s's own dense row
        ((alone_pos, alone_sc),) = lex.search([query], 6, excluded=excluded)
        assert pos.tolist() == alone_pos.tolist() and np.array_equal(sc, alone_sc)
        assert np.array_equal(sc, dense[pos])  # bit for bit: the same sums in the same order
        keep = [i for i in np.flatnonzero(dense > 0) if i not in set(excluded.tolist())]
        assert len(pos) == min(6, len(keep)) and not set(pos.tolist()) & {0, 5, 9}


def test_the_cut_keeps_the_lowest_positions_among_ties_whatever_order_the_candidates_came_in():
    rng = np.random.default_rng(0)
    scores = rng.choice([1.0, 2.0, 3.0], size=200).astype(np.float32)  # ties everywhere, the cut included
    positions = rng.permutation(1000)[:200]
    for k in (0, 1, 7, 50, 200, 300):
        want = sorted(zip((-scores).tolist(), positions.tolist(), strict=True))[
            :k
        ]  # best first, then by position
        for order in (np.arange(200), rng.permutation(200), np.argsort(positions)):
            pos, sc = top_k(positions[order], scores[order], k)
            assert list(zip((-sc).tolist(), pos.tolist(), strict=True)) == want
            assert pos.dtype == np.int64 and sc.dtype == np.float32
