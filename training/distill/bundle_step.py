"""The distillation step of the pipeline: train cheap query encoders into a *staged* bundle and score them.

Between `build_bundle` and `BundleStore.publish` (like `attach_onnx`): trains the configured students
(`training.distill.students_fit`) against the bundle's fixed document vectors, writes them under
`<bundle>/query_encoders/<variant>/`, scores each on the evaluation queries through the bundle's own index
(nDCG@10 and recall@10, against the full query encoder on the same index) and the curve of routing its
least confident queries to the full model (contract/encoding/routing.py), records it all in the
manifest's `extras["query_encoders"]` and refreshes the checksums. The API reads that record to decide
which query encoder may serve (`SEARCH_MAX_NDCG_LOSS`).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contract.atomic import write_json_atomic
from contract.bundles.bundle import (
    MANIFEST_FILE,
    MODEL_DIR,
    Bundle,
    Manifest,
    checksums,
    load_bundle,
    new_version_id,
    read_manifest,
)
from contract.encoding.query_encoders import EXTRAS_KEY, SUBDIR, load_variant
from contract.encoding.routing import routing_curve, top2_margins
from contract.errors import ConfigError
from training.bundle.store import BundleStore, PublishResult
from training.data.retrieval_data import RetrievalData
from training.distill.config import DistillConfig
from training.distill.students_fit import distill_query_encoders
from training.eval.search_metrics import per_query_metrics, search_metrics
from training.gap.served_risk import served_risks

logger = logging.getLogger(__name__)

N_TIMING_QUERIES = 32  # evaluation queries stored with the record; the API times encoders on them


def score_queries(
    bundle: Any,
    query_emb: np.ndarray,
    qids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
) -> dict[str, float]:
    """Mean nDCG@10 and recall@10 of normalised query vectors (n, D), searched in the bundle's index."""
    return search_metrics(
        bundle.encoder.similarity, query_emb, qids, qrels, bundle.doc_ids, index=bundle.index
    )


def served_ndcg_by_query(
    bundle: Any,
    query_emb: np.ndarray,
    qids: Sequence[str],
    qrels: Mapping[str, Mapping[str, int]],
) -> dict[str, float]:
    """{qid: nDCG@10} of normalised query vectors (n, D) searched in the bundle's index, as served."""
    per_query = per_query_metrics(
        bundle.encoder.similarity, query_emb, qids, qrels, bundle.doc_ids, index=bundle.index
    )
    return per_query["ndcg@10"]


def bundle_doc_embeddings(bundle: Any) -> np.ndarray:
    """The bundle's document vectors: read back from an exact inner-product index, else re-encoded."""
    index = bundle.index
    if bundle.encoder.similarity.identity_index_space and index.info.factory.startswith("Flat"):
        return np.ascontiguousarray(index.index.reconstruct_n(0, index.ntotal), dtype=np.float32)  # (n, D)
    from contract.encoding.encoder import document_text

    logger.info("re-encoding %d documents (the index cannot give its vectors back)", len(bundle.doc_ids))
    docs = bundle.docstore.get(range(len(bundle.doc_ids)), ("title", "text"))
    return bundle.encoder.encode([document_text(d.get("title"), d.get("text") or "") for d in docs])


@dataclass(frozen=True)
class _Judged:
    """The judged queries every variant is scored on, with the full encoder's scores to compare against."""

    texts: list[str]
    qids: list[str]
    qrels: Mapping[str, Mapping[str, int]]
    full: dict[str, float]  # the full encoder's metrics
    full_per_query: Mapping[str, float]  # its nDCG@10 per query id


def _score_variant(
    bundle: Any, folder: Path, variant: str, info: dict[str, Any], judged: _Judged
) -> tuple[np.ndarray, dict[str, Any]]:
    """One variant's query vectors (n, D) and its record: scores, loss against the full encoder, build-time
    speed, and its routing curve (contract/encoding/routing.py) against the full encoder's per-query nDCG@10."""
    texts, qids, qrels, full, full_per_query = (
        judged.texts, judged.qids, judged.qrels, judged.full, judged.full_per_query
    )  # fmt: skip
    encoder = load_variant(folder, variant)
    encoder.encode(texts[:3])  # warm-up
    started = time.perf_counter()
    emb = encoder.encode(texts, batch_size=1)  # (n, D)
    per_query_ms = (time.perf_counter() - started) * 1000 / max(1, len(texts))
    scores = score_queries(bundle, emb, qids, qrels)
    mine = served_ndcg_by_query(bundle, emb, qids, qrels)
    margins = top2_margins(bundle.index, bundle.encoder.to_index_space(emb))  # (n,)
    curve = routing_curve(margins, [mine[q] for q in qids], [full_per_query[q] for q in qids])
    return emb, {
        "path": f"{SUBDIR}/{variant}",
        **scores,
        "ndcg_loss": round(full["ndcg@10"] - scores["ndcg@10"], 6),
        "recall_loss": round(full["recall@10"] - scores["recall@10"], 6),
        "build_ms_per_query": round(per_query_ms, 4),  # on the building machine; the API re-times
        "training": info,
        "routing": {"n_queries": len(qids), "curve": curve},
    }


def attach_query_encoders(
    bundle_dir: str | Path,
    train: RetrievalData,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    config: DistillConfig | None = None,
    doc_embeddings: np.ndarray | None = None,
    new_version: bool = False,
) -> dict[str, Any]:
    """Distil, score and record the query encoders of a staged bundle; returns the manifest record.

    `new_version`: the staged folder is a copy of a published bundle; give it a version id of its own.
    """
    config = config or DistillConfig()
    folder = Path(bundle_dir)
    bundle = load_bundle(folder, verify=False)
    try:
        doc_emb = doc_embeddings if doc_embeddings is not None else bundle_doc_embeddings(bundle)
        if doc_emb.shape[0] != len(bundle.doc_ids):
            raise ConfigError(f"{len(doc_emb)} document vectors for {len(bundle.doc_ids)} documents")
        trained = distill_query_encoders(
            bundle.encoder, folder / MODEL_DIR, folder / SUBDIR, train, bundle.doc_ids, doc_emb, config
        )
        qids = [q for q in queries if qrels.get(q)]
        texts = [queries[q] for q in qids]
        served_q = {"full": bundle.encoder.encode(texts, kind="query")}  # (n, D)
        full = score_queries(bundle, served_q["full"], qids, qrels)
        full_per_query = served_ndcg_by_query(bundle, served_q["full"], qids, qrels)
        judged = _Judged(texts, qids, qrels, full, full_per_query)
        record: dict[str, Any] = {
            "full": full,
            "n_queries": len(qids),
            "config": config.model_dump(mode="json"),
            "timing_queries": texts[:N_TIMING_QUERIES],
            "variants": {},
        }
        for variant, info in trained.items():
            served_q[variant], record["variants"][variant] = _score_variant(
                bundle, folder, variant, info, judged
            )
        record["served_risk"] = _served_risk(bundle, served_q, doc_emb, qids, qrels, seed=config.seed)
        logger.info(
            "query encoders on %d queries: full %s; %s",
            len(qids),
            full,
            {v: (r["ndcg@10"], r["recall@10"]) for v, r in record["variants"].items()},
        )
    finally:
        bundle.docstore.close()
    _record_in_manifest(folder, bundle.manifest, record, new_version=new_version)
    return record


def _served_risk(
    bundle: Bundle,
    served_q: dict[str, np.ndarray],
    doc_emb: np.ndarray,
    qids: list[str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    seed: int,
) -> dict[str, Any]:
    """Held-out risk of every served query encoder (training.gap.served_risk) in the report's setting."""
    # the gap report's setting when the bundle has one, else the training k rule's default batch
    n_negatives = bundle.report.k if bundle.report is not None else 31
    return served_risks(
        served_q, doc_emb, qids, qrels, bundle.doc_ids,
        similarity=bundle.encoder.similarity, n_negatives=n_negatives, seed=seed,
    )  # fmt: skip


def _record_in_manifest(
    folder: Path, manifest: Manifest, record: dict[str, Any], *, new_version: bool
) -> None:
    """Write the record into the staged bundle's manifest (a new version id if asked), re-checksummed."""
    manifest = manifest.model_copy(deep=True)
    manifest.extras[EXTRAS_KEY] = record
    if new_version:
        manifest.extras["distilled_from"] = manifest.version
        manifest.version = new_version_id()
    manifest.files = checksums(folder)
    write_json_atomic(folder / MANIFEST_FILE, manifest.model_dump(mode="json"))


def _drop_query_encoders(folder: Path) -> None:
    """A staged copy without its earlier query encoders: their folder, their record and their files in the
    manifest, which still listed them (so loading the copy failed on the first file deleted)."""
    shutil.rmtree(folder / SUBDIR, ignore_errors=True)
    manifest = read_manifest(folder)
    manifest.extras.pop(EXTRAS_KEY, None)
    manifest.files = {
        rel: digest for rel, digest in manifest.files.items() if not rel.startswith(f"{SUBDIR}/")
    }
    write_json_atomic(folder / MANIFEST_FILE, manifest.model_dump(mode="json"))


def distill_live_bundle(
    bundles_dir: str | Path,
    train: RetrievalData,
    test: RetrievalData,
    *,
    config: DistillConfig | None = None,
    force: bool = False,
) -> PublishResult:
    """`python -m training distill`: the live bundle plus distilled query encoders, as a new version.

    The documents, index and full model are copied unchanged, so the quality gate sees the same metrics
    (a tie passes it); nothing changes for clients until the API picks a distilled encoder itself.
    """
    store = BundleStore(bundles_dir)
    live = store.current_version()
    if live is None:
        raise ConfigError(f"{bundles_dir}: nothing is live to distil query encoders for")
    with store.build_dir() as staging:
        shutil.copytree(store.version_path(live), staging, dirs_exist_ok=True)
        _drop_query_encoders(staging)  # an earlier distillation's, if any
        attach_query_encoders(staging, train, test.queries, test.qrels, config=config, new_version=True)
        return store.publish(staging, force=force)
