"""BM25 over the overlay's documents, scored with the bundle's own statistics: the lexical delta.

Upserted documents live in the overlay (contract/mutations/overlay.py) until a reindex folds them into a
bundle. The dense side finds them through the overlay's exact delta index; this is the lexical side's
equivalent, so lexical and hybrid search see writes and deletes exactly when dense search does.

A delta document is scored with the formula and statistics of the bundle's BM25 index
(contract/index/lexical_index.py, Lucene's BM25 as bm25s computes it):

    score(d) = Σ_t idf(t) · tf(t, d) / (tf(t, d) + k1 · (1 − b + b · |d| / avgdl)),
    idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))

with N, df and avgdl the bundle's (df(t) = how many bundle documents hold t: the nonzero entries of t's
column in bm25s's score matrix; a term the bundle never saw has df 0). The bundle's statistics are not
updated by the delta, so the bundle's own scores stay what the index stores, and a delta document with
the same text as a bundle document scores exactly as that document does (tests/contract/test_overlay.py).
A reindex recomputes everything over the folded corpus.

avgdl is recorded in lexical.json by bundles built since (training/hybrid/bm25_build.py); for older
bundles it is computed once from the document store, with the same analysis, when the first delta
document arrives.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from contract.index.lexical_index import K1, B, LexicalIndex, analyze
from contract.index.vector_index import Ranking


class DeltaLexical:
    """Term counts of the overlay's live delta documents by slot, scored against one bundle's BM25."""

    def __init__(self, lexical: LexicalIndex, avgdl: Callable[[], float]):
        self.lexical = lexical
        self._avgdl_source = avgdl
        self._avgdl: float | None = None
        self.k1 = float(lexical.params.get("k1", K1))
        self.b = float(lexical.params.get("b", B))
        self._docs: dict[int, tuple[Counter[str], int]] = {}  # slot -> (term counts, length in terms)
        self._idf: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._docs)

    @property
    def avgdl(self) -> float:
        if self._avgdl is None:
            recorded = self.lexical.params.get("avgdl")
            self._avgdl = float(recorded) if recorded else self._avgdl_source()
        return self._avgdl

    def idf(self, term: str) -> float:
        """The bundle's idf of `term` (df 0 for a term no bundle document holds)."""
        found = self._idf.get(term)
        if found is None:
            token = self.lexical.retriever.vocab_dict.get(term)
            df = 0
            if token is not None:
                indptr = self.lexical.retriever.scores["indptr"]
                df = int(indptr[token + 1] - indptr[token])
            n = self.lexical.n_docs
            found = self._idf[term] = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return found

    def add(self, slot: int, text: str) -> None:
        terms = analyze(text)
        self._docs[slot] = (Counter(terms), len(terms))
        _ = self.avgdl  # known before the first search, off the request that would otherwise pay for it

    def remove(self, slot: int) -> None:
        self._docs.pop(slot, None)

    def scores(self, text: str, slots: Sequence[int]) -> np.ndarray:
        """(len(slots),) float32 BM25 scores of those delta documents for one query."""
        query = list(dict.fromkeys(analyze(text)))  # distinct terms, as LexicalIndex.scores
        out = np.zeros(len(slots), dtype=np.float32)
        if not query:
            return out
        avgdl = self.avgdl
        for i, slot in enumerate(slots):
            counts, length = self._docs[slot]
            norm = self.k1 * ((1 - self.b) + self.b * length / avgdl)
            out[i] = sum(self.idf(t) * counts[t] / (counts[t] + norm) for t in query if t in counts)
        return out

    def search(self, texts: Sequence[str], k: int, slots: np.ndarray | None = None) -> list[Ranking]:
        """Per text: (delta keys -(slot + 1) int64, scores float32), best first, at most k, score > 0;
        `slots` restricts to those delta slots (a metadata filter), None = every live delta document."""
        candidates = sorted(self._docs) if slots is None else [int(s) for s in slots if int(s) in self._docs]
        keys = -(np.asarray(candidates, dtype=np.int64) + 1)
        out: list[Ranking] = []
        for text in texts:
            s = self.scores(text, candidates)
            hit = np.flatnonzero(s > 0)
            order = hit[np.lexsort((hit, -s[hit]))][:k]  # best first; ties by slot, as a stable rule
            out.append((keys[order], s[order]))
        return out


def merge(first: Ranking, second: Ranking, k: int) -> Ranking:
    """Two rankings of one query merged by score (the first wins ties), at most k."""
    keys = np.concatenate([first[0], second[0]])
    scores = np.concatenate([first[1], second[1]])
    order = np.argsort(-scores, kind="stable")[:k]
    return keys[order], scores[order]
