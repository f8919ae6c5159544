"""BM25 over a bundle's documents: the lexical half of hybrid search (read side, served by the API).

Built at index time (training.hybrid.bm25_build) over the same documents as the vector index, in the same
position order, and saved in the bundle's `lexical/` folder, where the manifest checksums it like every
other file. Scores are Lucene's BM25 as implemented by `bm25s` (Lù 2024, arXiv 2407.03618), sparse
matrices of precomputed term scores: for query terms t (distinct, after analysis) and document d,

    score(d) = Σ_t idf(t) · tf(t, d) / (tf(t, d) + k1 · (1 − b + b · |d| / avgdl)),
    idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))

Analysis (the same for documents and queries): lower-case, words of two or more word characters, English
stop words removed, Snowball English stems (PyStemmer). Why bm25s rather than SQLite FTS5 in the
document store: bench/lexical_choice.py prints both engines' scifact quality and query latency.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

PARAMS_FILE = "lexical.json"  # our own record beside bm25s's files: analysis, k1, b, number of documents
TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")
K1, B = 1.2, 0.75  # Lucene's and Elasticsearch's defaults
ANALYZER = "lower|word2+|stop-en|snowball-en"  # recorded: a bundle analysed differently is refused


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
        contract.mutations.overlay.Scope.restriction() fills once for both indexes."""
        mask = None
        if allowed is not None:
            mask = np.zeros(self.n_docs, dtype=bool)
            mask[allowed] = True
        if excluded is not None and len(excluded):
            if mask is None:
                mask = np.ones(self.n_docs, dtype=bool)
            mask[excluded] = False
        out = []
        for text in texts:
            s = self.scores(text)
            hit = s > 0
            if mask is not None:
                hit &= mask
            cand = np.flatnonzero(hit)
            if len(cand) > k:
                cand = cand[np.argpartition(-s[cand], k - 1)[:k]]
            order = np.lexsort((cand, -s[cand]))  # best first; ties by position, as a stable rule
            out.append((cand[order].astype(np.int64), s[cand[order]]))
        return out
