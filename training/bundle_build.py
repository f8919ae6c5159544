"""build_bundle: write one complete bundle folder (encoder, FAISS index, ids, documents, report, manifest)
into a staging folder, ready for BundleStore.publish. The layout is contract.bundle's."""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.atomic import write_json_atomic
from contract.bundle import (
    DOCS_FILE,
    IDS_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    MODEL_DIR,
    REPORT_DIR,
    CodeVersion,
    Manifest,
    MetricInfo,
    checksums,
    new_version_id,
)
from contract.docstore import write_docstore
from contract.encoder import Encoder, document_text
from contract.errors import BundleInvalid, IndexBuildError
from contract.vector_index import IndexInfo
from training.bundle_card import write_bundle_model_card
from training.index_factory import build_index
from training.portable import portable, relocate_report

if TYPE_CHECKING:
    from training.data import Document

logger = logging.getLogger(__name__)

# (version, index-space vectors, tune queries or None) -> (IndexInfo, manifest extras)
IndexBuilder = Callable[[str, np.ndarray, np.ndarray | None], tuple[IndexInfo, dict[str, Any]]]


def code_version() -> CodeVersion:
    try:
        package = importlib_metadata.version("infonce-search")
    except importlib_metadata.PackageNotFoundError:
        package = "0+unknown"
    sha = None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        sha = out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass  # not a git checkout (installed wheel, container): the package version still identifies it
    return CodeVersion(package=package, git_sha=sha)


def build_bundle(
    encoder: Encoder,
    corpus: dict[str, Document],
    *,
    staging_dir: str | Path,
    doc_embeddings: np.ndarray | None = None,
    index_kind: str = "auto",
    tune_queries: np.ndarray | None = None,
    target_recall: float = 0.95,
    memory_budget_bytes: int | None = None,
    training_config: dict[str, Any] | None = None,
    metrics: dict[str, dict[str, float]] | None = None,
    report_dir: str | Path | None = None,
    base_model: str | None = None,
    extras: dict[str, Any] | None = None,
    batch_size: int = 32,
    show_progress: bool = True,
    index_builder: IndexBuilder | None = None,
) -> Path:
    """Write a complete bundle into `staging_dir` (new or empty); publish it with BundleStore.publish.

    `doc_embeddings` are Encoder.encode rows in corpus order (skips re-encoding); `tune_queries` are
    Encoder.encode rows of real held-out queries, used to tune the ANN index to `target_recall`.
    `index_builder`: builds the index somewhere else than index.faiss (training.milvus_publish); it gets
    the version id, the index-space vectors and tune queries, and returns the IndexInfo and manifest extras.
    """
    staging = Path(staging_dir)
    if staging.exists() and any(staging.iterdir()):
        raise BundleInvalid(f"{staging}: staging folder is not empty")
    if not corpus:
        raise IndexBuildError("cannot build a bundle from an empty corpus")
    staging.mkdir(parents=True, exist_ok=True)
    ids = list(corpus)
    if doc_embeddings is None:
        texts = [document_text(corpus[i].title, corpus[i].text) for i in ids]
        doc_embeddings = encoder.encode(
            texts, kind="document", batch_size=batch_size, show_progress=show_progress
        )
    if doc_embeddings.shape != (len(ids), encoder.dim):
        raise IndexBuildError(
            f"doc_embeddings has shape {doc_embeddings.shape}, expected ({len(ids)}, {encoder.dim})"
        )
    vectors = encoder.to_index_space(doc_embeddings)  # (n, dim)
    queries = encoder.to_index_space(tune_queries) if tune_queries is not None and len(tune_queries) else None
    version = new_version_id()
    extras = dict(extras or {})
    if index_builder is not None:
        info, index_extras = index_builder(version, vectors, queries)
        extras.update(index_extras)
    else:
        index = build_index(
            vectors,
            metric=encoder.index_metric,
            kind=index_kind,
            tune_queries=queries,
            target_recall=target_recall,
            memory_budget_bytes=memory_budget_bytes,
        )
        index.save(staging / INDEX_FILE)
        info = index.info
    encoder.save(staging / MODEL_DIR)
    write_json_atomic(staging / IDS_FILE, ids)
    write_docstore(staging / DOCS_FILE, (corpus[i] for i in ids))
    if report_dir is not None:
        shutil.copytree(report_dir, staging / REPORT_DIR)
        relocate_report(staging / REPORT_DIR / "report.json", MODEL_DIR)  # no build-machine path in a bundle
    # a bundle names no absolute path of the machine that built it (training/portable.py)
    base_model = portable(base_model or encoder.source or "all-MiniLM-L6-v2")
    training_config = portable(training_config or {})
    extras = portable(extras or {})
    write_bundle_model_card(
        staging, training_config=training_config, base_model=base_model, metrics=metrics or {}, extras=extras
    )  # replaces the base model's card that sentence-transformers saved
    manifest = Manifest(
        version=version,
        created_at=datetime.now(UTC),
        base_model=base_model,
        training_config=training_config,
        dim=encoder.dim,
        metric=MetricInfo(index=encoder.index_metric, similarity=encoder.metric),
        similarity=encoder.similarity,
        n_vectors=len(ids),
        index=info,
        metrics=metrics or {},
        files=checksums(staging),
        code_version=code_version(),
        extras=extras,
    )
    write_json_atomic(staging / MANIFEST_FILE, manifest.model_dump(mode="json"))
    logger.info("built bundle %s in %s (%d docs, %s)", manifest.version, staging, len(ids), info.factory)
    return staging
