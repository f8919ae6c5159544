"""A query-side version staged from its parent: the parent's index, documents, BM25 and document tower
shared (hard links), a new query tower, its own metrics, fusion, report and manifest.

Shared, never copied or re-encoded: `index.faiss`, `ids.json`, `docs.sqlite`, `lexical/` and the parent's
document tower, which becomes `model/document/` (a two-tower model folder: contract/encoding/encoder.py).
Each is a hard link to the parent's file: one inode, the parent's bytes, so a 1M-document index costs no
copy and no disk. The manifest still lists every file's sha256 and publishing verifies them all
(contract.bundles.bundle.validate), so a shared file damaged later fails both versions' checks. Published
versions are never written to, so sharing an inode is safe; pruning the parent only drops its own link.
Where a hard link is impossible (another filesystem), the file is copied and the record says so.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contract.bundles.bundle import DOCS_FILE, IDS_FILE, INDEX_FILE, LEXICAL_DIR, MODEL_DIR
from contract.encoding.encoder import DOCUMENT_DIR
from contract.encoding.similarity import Similarity
from contract.index.fusion import DEFAULT_DEPTH, MODES, FusionParams
from contract.index.lexical_index import LexicalIndex
from contract.index.vector_index import Ranking
from training.hybrid.fusion_tuning import metrics_of, runs_for_mode, tune

logger = logging.getLogger(__name__)

SHARED_FILES = (INDEX_FILE, IDS_FILE, DOCS_FILE)
DOCUMENT_TOWER = f"{MODEL_DIR}/{DOCUMENT_DIR}/"


def shared_target(rel: str, parent_two_towers: bool) -> str | None:
    """Where a parent's file goes in the child (None: not shared). The parent's document tower is its
    `model/document/` (two towers) or its whole `model/` folder, which becomes the child's `model/document/`."""
    if rel in SHARED_FILES or rel.startswith(LEXICAL_DIR + "/"):
        return rel
    if parent_two_towers:
        return rel if rel.startswith(DOCUMENT_TOWER) else None
    if rel.startswith(MODEL_DIR + "/"):
        return DOCUMENT_TOWER + rel.removeprefix(MODEL_DIR + "/")
    return None


def link_shared(parent: Path, staging: Path, parent_files: Mapping[str, str]) -> dict[str, str]:
    """Hard-link the parent's shared files into `staging`; {child path: "linked" | "copied"}."""
    two_towers = any(rel.startswith(DOCUMENT_TOWER) for rel in parent_files)
    done: dict[str, str] = {}
    for rel in sorted(parent_files):
        target = shared_target(rel, two_towers)
        if target is None:
            continue
        src, dst = parent / rel, staging / target
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
            done[target] = "linked"
        except OSError as exc:  # another filesystem, or links not allowed: a copy still verifies
            logger.warning("cannot hard-link %s (%s): copying it", rel, exc.strerror or exc)
            shutil.copy2(src, dst)
            done[target] = "copied"
    linked = sum(1 for v in done.values() if v == "linked")
    logger.info(
        "shared %d files with the parent (%d hard links, %d copies)", len(done), linked, len(done) - linked
    )
    return done


def dense_runs(
    index: Any, similarity: Similarity, qids: Sequence[str], query_emb: np.ndarray, depth: int
) -> dict[str, Ranking]:
    """Each query's ranking through the live index (positions, scores), as the API searches."""
    rows = index.search(similarity.to_index_space(query_emb), depth)
    return {q: (rows[i][0], rows[i][1]) for i, q in enumerate(qids)}


def retune_modes(
    lexical: LexicalIndex | None,
    doc_ids: Sequence[str],
    validation: tuple[dict[str, Ranking], Mapping[str, str], Mapping[str, Mapping[str, int]]] | None,
    test: tuple[dict[str, Ranking], Mapping[str, str], Mapping[str, Mapping[str, int]]],
    *,
    inherited: Mapping[str, Any] | None = None,
    depth: int = DEFAULT_DEPTH,
) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """Fusion tuned again for the new query tower on the validation carve, and every mode scored on test:
    (extras["retrieval"] record, {mode: metrics}). `validation` / `test`: (dense runs, queries, qrels).
    Without validation queries the parent's record (`inherited`: its default mode and fusion) is kept.
    Without a BM25 index (a bundle from before hybrid search) only dense is scored and served."""
    test_dense, test_queries, test_qrels = test
    if lexical is None:
        return {"default_mode": "dense", "fusion": FusionParams(depth=depth).record(), "validation": None}, {
            "dense": metrics_of(test_dense, test_qrels, list(doc_ids))
        }
    if validation is not None and validation[1]:
        val_dense, val_queries, val_qrels = validation
        val_lex = dict(zip(val_queries, lexical.search(list(val_queries.values()), depth), strict=True))
        record = tune(val_dense, val_lex, val_qrels, list(doc_ids), depth=depth)
    elif inherited is not None and inherited.get("fusion"):
        record = {"default_mode": str(inherited.get("default_mode", "dense")), "fusion": dict(inherited["fusion"]),
                  "validation": None, "inherited_from_parent": True}  # fmt: skip
    else:
        record = {"default_mode": "dense", "fusion": FusionParams(depth=depth).record(), "validation": None}
    params = FusionParams.from_record(record["fusion"])
    test_lex = dict(zip(test_queries, lexical.search(list(test_queries.values()), depth), strict=True))
    by_mode = {
        m: metrics_of(runs_for_mode(m, test_dense, test_lex, params), test_qrels, list(doc_ids))
        for m in MODES
    }
    record["lexical"] = lexical.params
    return record, by_mode
