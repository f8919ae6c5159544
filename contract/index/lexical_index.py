"""BM25 over a bundle's documents: the lexical half of hybrid search (read side, served by the API).

Built at index time (training.hybrid.bm25_build) over the same documents as the vector index, in the same
position order, and saved in the bundle's `lexical/` folder, where the manifest checksums it like every
other file. Scores are Lucene's BM25 as implemented by `bm25s` (Lù 2024, arXiv 2407.03618), sparse
matrices of precomputed term scores: for query terms t (distinct, after analysis) and document d,

    score(d) = Σ_t idf(t) · tf(t, d) / (tf(t, d) + k1 · (1 − b + b · |d| / avgdl)),
    idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))

Analysis (the same for documents and queries): lower-case, words of two or more word characters, English
stop words removed, Snowball English stems (PyStemmer). Why bm25s rather than SQLite FTS5 in the
document store: docs/bench-retired.md (lexical_choice) records both engines' scifact quality and query latency.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

PARAMS_FILE = "lexical.json"  # our own record beside bm25s's files: analysis, k1, b, number of documents
TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")
K1, B = 1.2, 0.75  # Lucene's and Elasticsearch's defaults
ANALYZER = "lower|word2+|stop-en|snowball-en"  # recorded: a bundle analysed differently is refused
POSTINGS_UP_TO = 1  # texts a search scores from their postings one by one rather than in one sparse product


@lru_cache(maxsize=1)
def _analysis() -> tuple[frozenset[str], Any]:
    import Stemmer
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN), Stemmer.Stemmer("english")


def analyze(text: str) -> list[str]:
    """The index terms of a text, in order (repeats kept: term frequency counts them)."""
    stop, stemmer = _analysis()
    words = [w for w in TOKEN_PATTERN.findall(text.lower()) if w not in stop]
    return list(stemmer.stemWords(words))


@dataclass
class LexicalIndex:
    """A loaded BM25 index; position i is the bundle's document i (ids.json order)."""

    retriever: Any  # bm25s.BM25
    n_docs: int
    params: dict[str, Any]

    @classmethod
    def load(cls, folder: str | Path, *, mmap: bool = False) -> LexicalIndex:
        """Load `folder` (bm25s files + lexical.json); ValueError naming the file when it does not fit."""
        import bm25s

        folder = Path(folder)
        params_path = folder / PARAMS_FILE
        try:
            params = json.loads(params_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{params_path}: unreadable ({exc})") from exc
        if params.get("analyzer") != ANALYZER:
            raise ValueError(
                f"{params_path}: analyzer {params.get('analyzer')!r}, this server has {ANALYZER!r}"
            )
        retriever = bm25s.BM25.load(str(folder), mmap=mmap, show_progress=False, verbosity=0)
        n_docs = int(retriever.scores["num_docs"])
        if n_docs != params.get("n_docs"):
            raise ValueError(
                f"{params_path}: {n_docs} documents in the index, {params.get('n_docs')} recorded"
            )
        return cls(retriever, n_docs, params)

    def scores(self, text: str) -> np.ndarray:
        """(n_docs,) float32 BM25 score of every document for one query (0 = no term in common)."""
        vocab = self.retriever.vocab_dict
        ids = list(dict.fromkeys(vocab[t] for t in analyze(text) if t in vocab))  # distinct terms
        if not ids:
            return np.zeros(self.n_docs, dtype=np.float32)
        return np.asarray(self.retriever.get_scores_from_ids(ids), dtype=np.float32)

    @cached_property
    def _term_matrix(self) -> Any:
        """bm25s's precomputed term scores as a (terms, n_docs) CSR matrix: row t holds idf(t)·tf-part of
        every document containing t (the arrays `get_scores_from_ids` reads, not copied)."""
        from scipy.sparse import csr_matrix

        s = self.retriever.scores
        indptr = s["indptr"]
        return csr_matrix((s["data"], s["indices"], indptr), shape=(len(indptr) - 1, self.n_docs), copy=False)

    def _term_ids(self, text: str) -> list[int]:
        """The text's distinct index terms, in query order (the order every path sums them in)."""
        vocab = self.retriever.vocab_dict
        return list(dict.fromkeys(vocab[t] for t in analyze(text) if t in vocab))

    def _batch_scores(self, texts: Sequence[str]) -> Any:
        """(len(texts), n_docs) CSR of BM25 scores, one sparse product for the batch (hybrid and lexical
        mode search every text of a micro-batch at once). Each row sums its query's distinct terms in
        query order, as `get_scores_from_ids` does, so the float32 scores are the same."""
        from scipy.sparse import csr_matrix

        columns: list[int] = []
        indptr = [0]
        for text in texts:
            columns += self._term_ids(text)
            indptr.append(len(columns))
        matrix = self._term_matrix
        queries = csr_matrix(
            (np.ones(len(columns), dtype=matrix.dtype), np.asarray(columns, dtype=np.int32), indptr),
            shape=(len(texts), matrix.shape[0]),
        )  # (nq, terms)
        return queries @ matrix  # (nq, n_docs), only the documents sharing a term

    def _postings_scores(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """One text's (positions, scores) of the documents sharing a term with it, its terms' postings
        added into one float32 row in query order: the same sums as a row of `_batch_scores`, without
        building two sparse matrices for one row."""
        terms = self._term_ids(text)
        if not terms:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        matrix = self._term_matrix
        indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
        acc = np.zeros(self.n_docs, dtype=data.dtype)  # (n_docs,)
        for t in terms:
            acc[indices[indptr[t] : indptr[t + 1]]] += data[indptr[t] : indptr[t + 1]]  # a term's documents
        cand = np.flatnonzero(acc)
        return cand, acc[cand]

    def search(
        self,
        texts: Sequence[str],
        k: int,
        *,
        allowed: np.ndarray | None = None,
        excluded: np.ndarray | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: (positions int64, scores float32), best first, at most k, only documents sharing a
        term with the query (score > 0); `allowed` restricts to those positions (a metadata filter),
        `excluded` keeps those out (deleted documents): the two keywords of VectorIndex.search, which
        contract.mutations.overlay.Scope.restriction() fills once for both indexes.

        A batch is scored in one sparse product, a lone text from its terms' postings: either way a query
        costs its matching documents, not a dense pass over the corpus (bench/serving/hybrid_latency.py).
        Both give the same scores and, through `top_k`, the same cut."""
        mask = None
        if allowed is not None:
            mask = np.zeros(self.n_docs, dtype=bool)
            mask[allowed] = True
        if excluded is not None and len(excluded):
            if mask is None:
                mask = np.ones(self.n_docs, dtype=bool)
            mask[excluded] = False
        # BM25L / BM25+ indexes give every document a score: those are scored one dense row at a time.
        # Up to POSTINGS_UP_TO texts, each adds its terms' postings itself: one sparse product costs more
        # than that for one row, and less from two (bench/results/hybrid_profile_pycode.txt, batches 1, 2, 4).
        dense = self.retriever.nonoccurrence_array is not None
        batch = None if dense or len(texts) <= POSTINGS_UP_TO else self._batch_scores(texts)
        out = []
        for i, text in enumerate(texts):
            if dense:
                s = self.scores(text)
                cand = np.flatnonzero(s > 0)
                sc = s[cand]
            elif batch is None:
                cand, sc = self._postings_scores(text)
            else:
                start, end = batch.indptr[i], batch.indptr[i + 1]
                cand, sc = batch.indices[start:end].astype(np.int64), batch.data[start:end]
            keep = sc > 0
            if mask is not None:
                keep &= mask[cand]
            out.append(top_k(cand[keep], sc[keep], k))
        return out


def top_k(positions: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k (positions int64, scores float32), best first, ties by position: the same cut whatever
    order the candidates came in (a sparse product's and the postings' orders differ)."""
    if k <= 0:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]  # the k-th best score
        keep = scores >= kth  # every tie at the cut, so the rule below decides among them
        positions, scores = positions[keep], scores[keep]
    order = np.lexsort((positions, -scores))[:k]
    return positions[order].astype(np.int64), scores[order].astype(np.float32)
