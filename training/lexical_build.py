"""Build a bundle's BM25 index (contract.lexical_index reads it) over the documents in position order."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from contract.lexical_index import ANALYZER, K1, PARAMS_FILE, B, analyze

logger = logging.getLogger(__name__)

LEXICAL_DIR = "lexical"


def build_lexical_index(texts: Sequence[str], folder: str | Path) -> Path:
    """Analyse `texts` (document i = position i), index them with bm25s and save into `folder` (new)."""
    import bm25s

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=False)
    retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
    terms = [analyze(t) for t in texts]
    if not any(terms):  # bm25s cannot index an empty vocabulary; a term no query can have changes no score
        terms = [["\x00"] for _ in terms]
    retriever.index(terms, show_progress=False)
    retriever.save(str(folder), show_progress=False)
    params = {
        "library": "bm25s",
        "library_version": metadata.version("bm25s"),
        "method": "lucene",
        "k1": K1,
        "b": B,
        "analyzer": ANALYZER,
        "n_docs": len(texts),
        "vocabulary": len(retriever.vocab_dict),
    }
    (folder / PARAMS_FILE).write_text(json.dumps(params, indent=2) + "\n", encoding="utf-8")
    logger.info("BM25 index: %d documents, %d terms", len(texts), len(retriever.vocab_dict))
    return folder
