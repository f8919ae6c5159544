"""No-duplicate batching and negatives, checked against brute-force oracles on seeded random data."""

from __future__ import annotations

import numpy as np
import pytest

from training.train.negatives import MiningWindow, mine_hard_negatives, no_duplicate_batches, random_negatives


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_no_duplicate_batches_never_mixes_a_query_with_its_known_positives():
    # Given: 60 pairs over 20 queries and 25 documents, several queries sharing documents
    rng = np.random.default_rng(0)
    queries = [f"q{i % 20}" for i in range(60)]
    docs = [f"d{(i * 7) % 25}" for i in range(60)]
    positives: dict[str, set[str]] = {}
    for q, d in zip(queries, docs, strict=True):
        positives.setdefault(q, set()).add(d)
    # When
    batches = no_duplicate_batches(queries, docs, 8, rng, positives=positives, min_size=1)
    # Then: every pair exactly once, batches full-size bounded, and no in-batch false negative
    assert sorted(i for b in batches for i in b) == list(range(60))
    for batch in batches:
        assert 1 <= len(batch) <= 8
        batch_queries = [queries[i] for i in batch]
        batch_docs = [docs[i] for i in batch]
        assert len(set(batch_queries)) == len(batch) and len(set(batch_docs)) == len(batch)
        for i in batch:
            for j in batch:
                if i != j:  # d_j is a negative for q_i: it must not be one of q_i's positives
                    assert docs[j] not in positives[queries[i]]


def test_no_duplicate_batches_drops_single_pair_batches_and_is_seeded():
    queries = ["a", "a", "a"]  # one query: every pair clashes with the others
    docs = ["x", "y", "z"]
    assert no_duplicate_batches(queries, docs, 4, np.random.default_rng(1)) == []
    q = [f"q{i}" for i in range(10)]
    first = no_duplicate_batches(q, q, 4, np.random.default_rng(3))
    again = no_duplicate_batches(q, q, 4, np.random.default_rng(3))
    assert first == again and [len(b) for b in first] == [4, 4, 2]


def test_random_negatives_are_distinct_uniform_and_avoid_excluded():
    rng = np.random.default_rng(0)
    exclude = {0, 1, 2}
    counts = np.zeros(10)
    for _ in range(2000):
        picked = random_negatives(10, 3, rng, exclude=exclude)
        assert len(set(picked)) == 3 and exclude.isdisjoint(picked)
        counts[picked] += 1
    allowed = counts[3:] / counts[3:].sum()
    assert np.allclose(allowed, 1 / 7, atol=0.02)  # uniform over the 7 allowed documents
    assert random_negatives(5, 10, rng, exclude={4}) != []  # asks for more than exist: gets the 4 left
    assert sorted(random_negatives(5, 10, rng, exclude={4})) == [0, 1, 2, 3]


@pytest.mark.parametrize(("rank_min", "rank_max", "margin"), [(0, 10, 0.0), (3, 30, 0.05), (5, 12, 0.2)])
def test_mined_negatives_respect_rank_window_margin_and_positives(rank_min, rank_max, margin):
    # Given: queries, a corpus, one positive and a few extra known positives per query
    rng = np.random.default_rng(1)
    queries, docs = _unit_rows(rng, 30, 16), _unit_rows(rng, 200, 16)
    scores = queries @ docs.T  # (30, 200) oracle scores
    order = np.argsort(-scores, axis=1)
    positive = [int(order[i, 4]) for i in range(30)]  # a positive ranked 5th: inside most windows
    known = [{positive[i], int(order[i, rank_min]), int(order[i, rank_min + 1])} for i in range(30)]
    # When
    mined = mine_hard_negatives(
        queries, docs, positive, known, MiningWindow(4, rank_min, rank_max, margin), rng=rng
    )
    # Then: each negative is in the window, not a known positive, below positive − margin
    assert len(mined) == 30
    for i, negs in enumerate(mined):
        ranks = {int(j): r for r, j in enumerate(order[i])}
        window_ok = [
            int(j)
            for j in order[i, rank_min:rank_max]
            if int(j) not in known[i] and scores[i, j] < scores[i, positive[i]] - margin
        ]
        assert len(negs) == min(4, len(window_ok)) and len(set(negs)) == len(negs)
        for j in negs:
            assert rank_min <= ranks[j] < rank_max
            assert j not in known[i]
            assert scores[i, j] < scores[i, positive[i]] - margin


def test_mined_negatives_use_the_given_similarity():
    # Under negative-distance similarity the ranking differs from the inner product's on unnormalised rows
    rng = np.random.default_rng(2)
    q = rng.normal(size=(5, 4)).astype(np.float32)
    d = rng.normal(size=(50, 4)).astype(np.float32) * rng.uniform(0.1, 3, size=(50, 1)).astype(np.float32)

    def neg_sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return -((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)

    sims = neg_sq_dist(q, d)
    positive = [int(np.argmax(sims[i])) for i in range(5)]
    mined = mine_hard_negatives(
        q,
        d,
        positive,
        [{p} for p in positive],
        MiningWindow(n=3, rank_min=1, rank_max=4, margin=0.0),
        rng=rng,
        similarity=neg_sq_dist,
    )
    for i, negs in enumerate(mined):
        assert set(negs) <= {int(j) for j in np.argsort(-sims[i])[1:4]}


@pytest.mark.parametrize("k", [1, 7, 50, 200])
def test_top_ranked_is_the_prefix_of_a_full_stable_sort(k):
    from training.train.negatives import top_ranked

    rng = np.random.default_rng(3)
    scores = rng.normal(size=(9, 200)).astype(np.float32)
    scores[:, 10] = scores[:, 11]  # a tie inside the ranking keeps index order
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(top_ranked(scores, k), expected)


def test_length_buckets_batch_pairs_of_like_length_and_use_each_pair_once():
    """`length_buckets`: each batch is drawn from one length quantile (so it pads to its own length), every
    pair is used once, the no-duplicate rule still holds, and the batches come in random order."""
    rng = np.random.default_rng(0)
    n, batch, buckets = 400, 20, 4
    lengths = [int(x) for x in rng.integers(10, 1000, n)]
    queries, docs = [f"q{i}" for i in range(n)], [f"d{i}" for i in range(n)]
    batches = no_duplicate_batches(
        queries, docs, batch, np.random.default_rng(1), lengths=lengths, buckets=buckets
    )
    assert sorted(i for b in batches for i in b) == list(range(n))  # each pair once
    rank = {i: r for r, i in enumerate(sorted(range(n), key=lambda i: lengths[i]))}
    quantile = [{rank[i] * buckets // n for i in b} for b in batches]
    assert all(len(q) == 1 for q in quantile)  # one bucket per batch
    order = [q.pop() for q in quantile]
    assert order != sorted(order)  # shuffled across buckets, not bucket after bucket
    plain = no_duplicate_batches(queries, docs, batch, np.random.default_rng(1))
    spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
    plain_spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in plain]
    assert np.mean(spread) < np.mean(plain_spread) / 2  # what a batch pads to is much closer to its texts
    assert (
        no_duplicate_batches(queries, docs, batch, np.random.default_rng(1), lengths=lengths, buckets=0)
        == plain
    )
