"""Can the live bundle be the fixed side of a retrain on this dataset? The query-side retrain needs it, and a
full retrain uses its vectors instead of a base-model corpus encode when it can.

It can when something is live, its index is FAISS (in the bundle), its model is cosine InfoNCE, and it holds
the dataset's documents unchanged: its evaluation fingerprint (every document, query and judgement of the
evaluation split) matches the dataset's, or failing that its ids, titles and texts are the corpus's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from contract.bundles.bundle import MANIFEST_FILE, load_bundle, read_manifest
from contract.index.backend import is_milvus
from training.bundle.store import FINGERPRINT_KEY, BundleStore, evaluation_fingerprint
from training.data.retrieval_data import RetrievalData
from training.data.split import load_split
from training.distill.query_bundle import EXTRAS_KEY as QUERY_RETRAIN_KEY
from training.distill.query_bundle import documents_adapted
from training.distill.query_tower import fixed_vectors
from training.train.phases import LiveReference

logger = logging.getLogger(__name__)


def query_side_blocker(
    store: BundleStore, data_dir: str | Path, eval_split: str, *, data: RetrievalData | None = None
) -> str | None:
    """Why a query-side retrain cannot run on this folder and dataset (None: it can). `auto` falls back to
    a full retrain on any reason: nothing live, an index outside the bundle (Milvus), a model that is not
    cosine InfoNCE, or documents that are not the live bundle's."""
    live = store.current_version()
    if live is None:
        return "nothing is live yet (a query-side retrain keeps the live bundle's documents)"
    manifest = read_manifest(store.version_path(live))
    if is_milvus(manifest.index):
        return f"live bundle {live} keeps its vectors in Milvus (query-side retrain needs its FAISS index)"
    if manifest.metric.similarity != "cosine":
        return f"live bundle {live} is an AnInfoNCE model (query-side retrain supports cosine InfoNCE)"
    data = data if data is not None else load_split(data_dir, eval_split)
    if manifest.extras.get(FINGERPRINT_KEY) == evaluation_fingerprint(data):
        return None  # the same documents, queries and judgements as the live bundle was built from
    return _documents_differ(store.version_path(live), data)


def live_reference(
    store: BundleStore, data_dir: str | Path, eval_split: str, *, data: RetrievalData | None = None
) -> LiveReference | None:
    """The live bundle's query encoder and document vectors (read back from its index), for a full retrain
    to evaluate "before" and mine negatives with instead of encoding the corpus with the base model; None
    when no live bundle holds this dataset's documents (query_side_blocker's conditions)."""
    reason = query_side_blocker(store, data_dir, eval_split, data=data)
    if reason is not None:
        # debug: on a first build (the demo's) there is no live bundle by design; nothing for a user to act on
        logger.debug("no live bundle's vectors to start from (%s): the base model encodes the corpus", reason)
        return None
    version = str(store.current_version())
    bundle = load_bundle(store.version_path(version), verify=False, mmap=True)
    try:
        vectors = fixed_vectors(bundle.index, range(bundle.index.ntotal))  # (n, D)
    finally:
        bundle.docstore.close()
    logger.info(
        "full retrain starts from live bundle %s's %d document vectors (no base encode)",
        version,
        len(vectors),
    )
    return LiveReference(bundle.encoder, list(bundle.doc_ids), vectors, version)


def _documents_differ(folder: Path, data: RetrievalData) -> str | None:
    """None when the bundle's documents are the dataset's corpus (ids, order, titles, texts)."""
    from contract.index.docstore import DocStore

    ids = json.loads((folder / "ids.json").read_text(encoding="utf-8"))
    if ids != list(data.corpus):
        return f"the dataset's documents are not those of live bundle {folder.name} (ids differ)"
    store = DocStore(folder / "docs.sqlite")
    try:
        for start in range(0, len(ids), 4096):
            rows = store.get(range(start, min(start + 4096, len(ids))), ("title", "text"))
            for doc_id, row in zip(ids[start : start + 4096], rows, strict=True):
                doc = data.corpus[doc_id]
                if (row.get("title") or "") != (doc.title or "") or (row.get("text") or "") != doc.text:
                    return f"document {doc_id} changed since live bundle {folder.name} was built"
    finally:
        store.close()
    return None


def documents_never_adapted(store: BundleStore) -> str | None:
    """Why the live bundle's documents were encoded by a base model that no run fine-tuned (None: they were
    adapted, or nothing says otherwise). A query-side retrain keeps that document side, and the gain of
    adapting to a corpus lives there (issue 40: on three corpora the query side kept 0-27 % of a full
    retrain's dense gain), so `auto` runs a full retrain on such a bundle."""
    live = store.current_version()
    version = live
    for _ in range(64):  # a query-side version without the record: ask its parent, whose documents it shares
        if version is None or not (store.root / version / MANIFEST_FILE).is_file():
            return None  # nothing live, or a parent pruned before versions kept the record: nothing says
        manifest = read_manifest(store.root / version)
        adapted = documents_adapted(manifest)
        if adapted is not None:
            break
        version = (manifest.extras.get(QUERY_RETRAIN_KEY) or {}).get("parent")
    else:
        return None
    if adapted:
        return None
    return (
        f"live bundle {live}'s documents were encoded by the base model {manifest.base_model} (no run adapted"
        " them): a full retrain adapts the document side, where the gain lives"
    )
