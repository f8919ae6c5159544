"""Build a bundle's BM25 index (contract.index.lexical_index reads it) over the documents in position order."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from contract.index.lexical_index import ANALYZER, K1, PARAMS_FILE, B, LexicalIndex, analyze

logger = logging.getLogger(__name__)

LEXICAL_DIR = "lexical"


def lexical_index(texts: Sequence[str]) -> LexicalIndex:
    """Analyse `texts` (document i = position i) and index them with bm25s, in memory."""
    import bm25s

    retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
    terms = [analyze(t) for t in texts]
    if not any(terms):  # bm25s cannot index an empty vocabulary; a term no query can have changes no score
        terms = [["\x00"] for _ in terms]
    retriever.index(terms, show_progress=False)
    params = {
        "library": "bm25s",
        "library_version": metadata.version("bm25s"),
        "method": "lucene",
        "k1": K1,
        "b": B,
        "analyzer": ANALYZER,
        "n_docs": len(texts),
        # mean document length in terms: BM25's avgdl, which the API's lexical delta scores new documents
        # with (contract/mutations/delta_lexical.py); bm25s does not save it
        "avgdl": sum(len(t) for t in terms) / max(len(terms), 1),
        "vocabulary": len(retriever.vocab_dict),
    }
    logger.info("BM25 index: %d documents, %d terms", len(texts), len(retriever.vocab_dict))
    return LexicalIndex(retriever, len(texts), params)


def build_lexical_index(texts: Sequence[str], folder: str | Path) -> Path:
    """`lexical_index(texts)` saved into `folder` (new): bm25s's arrays plus lexical.json."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=False)
    index = lexical_index(texts)
    index.retriever.save(str(folder), show_progress=False)
    (folder / PARAMS_FILE).write_text(json.dumps(index.params, indent=2) + "\n", encoding="utf-8")
    return folder
