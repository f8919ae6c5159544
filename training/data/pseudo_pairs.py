"""In-domain pseudo-pairs from the corpus alone: a sentence of a document as the query for the rest of it.

Like the title pairs (trainer.title_pairs), they need no queries and no qrels, only the corpus that gets
indexed anyway (the idea of the inverse cloze task, Lee et al. 2019, arXiv 1906.00300): the sentence is
removed from its positive, otherwise the query would be a substring of its document.
"""

from __future__ import annotations

import re

import numpy as np

from contract.encoding.encoder import document_text
from training.data.retrieval_data import Pair, RetrievalData

SENTENCE_QUERY_PREFIX = "sentence:"  # pseudo-query ids: "sentence:<doc id>"
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")  # where a text splits into sentences (distill's pairs too)
_WORDS = (6, 40)  # a query-like sentence: not a fragment, not a paragraph


def sentence_pairs(data: RetrievalData, n: int, rng: np.random.Generator) -> list[Pair]:
    """n seeded documents, each as (one of its sentences → title + the remaining text)."""
    if n == 0:
        return []
    docs = list(data.corpus.values())
    picked = sorted(int(i) for i in rng.choice(len(docs), size=min(n, len(docs)), replace=False))
    pairs: list[Pair] = []
    for i in picked:
        doc = docs[i]
        sentences = SENTENCE_BREAK.split(doc.text.strip())
        usable = [j for j, s in enumerate(sentences) if _WORDS[0] <= len(s.split()) <= _WORDS[1]]
        if len(sentences) < 2 or not usable:
            continue
        j = usable[int(rng.integers(len(usable)))]
        rest = " ".join(s for k, s in enumerate(sentences) if k != j)
        pairs.append(
            Pair(
                query=sentences[j],
                positive=document_text(doc.title, rest),
                query_id=SENTENCE_QUERY_PREFIX + doc.id,
                positive_id=doc.id,
            )
        )
    clash = next((p.query_id for p in pairs if p.query_id in data.queries), None)
    if clash is not None:
        raise ValueError(f"corpus_sentence_pairs: pseudo-query id {clash!r} is also a query id of the split")
    return pairs
