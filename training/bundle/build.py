"""build_bundle: write one complete bundle folder (encoder, FAISS index, ids, documents, report, manifest)
into a staging folder, ready for BundleStore.publish. The layout is contract.bundles.bundle's. What the
bundle records of its origin is one BundleRecord, how it is built one BuildOptions (its index part the
plan's IndexPlan, contract/jobs/plan.py)."""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.atomic import write_json_atomic
from contract.bundles.bundle import (
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
from contract.encoding.encoder import Encoder, document_text
from contract.errors import BundleInvalid, IndexBuildError
from contract.index.docstore import write_docstore
from contract.index.vector_index import IndexInfo
from contract.jobs.plan import IndexPlan
from training.bundle.portable_paths import portable, relocate_report
from training.cards.bundle_card import write_bundle_model_card
from training.export.index_factory import IndexBuilder, build_index
from training.export.shards import index_space

if TYPE_CHECKING:
    from training.data.retrieval_data import Document

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class BundleRecord:
    """What a bundle says about where it came from: the run's config.json, its held-out metrics, its gap
    report folder, the base model's name and the manifest's extras (the plan among them)."""

    training_config: dict[str, Any] | None = None
    metrics: dict[str, dict[str, float]] | None = None
    report_dir: str | Path | None = None
    base_model: str | None = None
    extras: dict[str, Any] | None = None


@dataclass(frozen=True)
class BuildOptions:
    """How the bundle is built: its index (the plan's IndexPlan: kind, recall target, memory budget), the
    real held-out queries the index is tuned on (Encoder.encode rows), encode batch size and bars, an
    `index_builder` that builds the index somewhere else than index.faiss (training.export.milvus_build:
    it gets the version id, the index-space vectors and tune queries, and returns the IndexInfo and
    manifest extras), and `scratch_dir`, where AnInfoNCE's scaled copy of the vectors is streamed to disk
    instead of RAM (training.export.shards.index_space)."""

    index: IndexPlan = field(default_factory=IndexPlan)
    tune_queries: np.ndarray | None = None
    batch_size: int = 32
    show_progress: bool = True
    index_builder: IndexBuilder | None = None
    scratch_dir: str | Path | None = None


def build_bundle(
    encoder: Encoder,
    corpus: dict[str, Document],
    staging_dir: str | Path,
    doc_embeddings: np.ndarray | None = None,
    *,
    record: BundleRecord | None = None,
    build: BuildOptions | None = None,
) -> Path:
    """Write a complete bundle into `staging_dir` (new or empty); publish it with BundleStore.publish.

    `doc_embeddings` are Encoder.encode rows in corpus order (skips re-encoding; a memory map is read
    chunk by chunk); `record` is what the manifest says of the bundle's origin, `build` how it is built.
    """
    record = record or BundleRecord()
    build = build or BuildOptions()
    staging = _empty_staging(staging_dir, corpus)
    ids = list(corpus)
    embeddings = _document_embeddings(encoder, corpus, ids, doc_embeddings, build)
    version = new_version_id()
    info, index_extras = _IndexStep(build).run(encoder, version, embeddings, staging)
    encoder.save(staging / MODEL_DIR)
    write_json_atomic(staging / IDS_FILE, ids)
    write_docstore(staging / DOCS_FILE, (corpus[i] for i in ids))
    if record.report_dir is not None:
        shutil.copytree(record.report_dir, staging / REPORT_DIR)
        relocate_report(staging / REPORT_DIR / "report.json", MODEL_DIR)  # no build-machine path in a bundle
    extras = {**(record.extras or {}), **index_extras}
    manifest = _write_manifest(staging, encoder, version, info, len(ids), replace(record, extras=extras))
    logger.info("built bundle %s in %s (%d docs, %s)", manifest.version, staging, len(ids), info.factory)
    return staging


def _empty_staging(staging_dir: str | Path, corpus: dict[str, Document]) -> Path:
    staging = Path(staging_dir)
    if staging.exists() and any(staging.iterdir()):
        raise BundleInvalid(f"{staging}: staging folder is not empty")
    if not corpus:
        raise IndexBuildError("cannot build a bundle from an empty corpus")
    staging.mkdir(parents=True, exist_ok=True)
    return staging


def _document_embeddings(
    encoder: Encoder,
    corpus: dict[str, Document],
    ids: list[str],
    given: np.ndarray | None,
    build: BuildOptions,
) -> np.ndarray:
    """`given` when its shape fits the corpus, else the corpus encoded now (n, dim)."""
    if given is None:
        texts = [document_text(corpus[i].title, corpus[i].text) for i in ids]
        given = encoder.encode(
            texts, kind="document", batch_size=build.batch_size, show_progress=build.show_progress
        )
    if given.shape != (len(ids), encoder.dim):
        raise IndexBuildError(f"doc_embeddings has shape {given.shape}, expected ({len(ids)}, {encoder.dim})")
    return given


@dataclass(frozen=True)
class _IndexStep:
    """The index of one bundle: index.faiss in the staging folder, or the builder's (a Milvus collection)."""

    build: BuildOptions

    def run(
        self, encoder: Encoder, version: str, embeddings: np.ndarray, staging: Path
    ) -> tuple[IndexInfo, dict[str, Any]]:
        """(IndexInfo, manifest extras); the vectors reach the index chunk by chunk (training.export.shards)."""
        build = self.build
        if build.scratch_dir is None:
            vectors = encoder.to_index_space(embeddings)  # (n, dim)
        else:
            vectors = index_space(
                encoder, embeddings, Path(build.scratch_dir) / "index-space"
            )  # (n, dim) memmap
        queries = None  # (n_queries, dim) in index space
        if build.tune_queries is not None and len(build.tune_queries):
            queries = encoder.to_index_space(build.tune_queries)
        if build.index_builder is not None:
            return build.index_builder(version, vectors, queries)
        index = build_index(
            vectors,
            metric=encoder.index_metric,
            kind=build.index.kind,
            tune_queries=queries,
            target_recall=build.index.target_recall,
            memory_budget_bytes=build.index.memory_budget_bytes,
        )
        index.save(staging / INDEX_FILE)
        return index.info, {}


def _write_manifest(
    staging: Path, encoder: Encoder, version: str, info: IndexInfo, n_vectors: int, record: BundleRecord
) -> Manifest:
    """The model card and the manifest (checksums of every staged file), last: they describe the rest."""
    # a bundle names no absolute path of the machine that built it (training/bundle/portable_paths.py)
    base_model = portable(record.base_model or encoder.source or "all-MiniLM-L6-v2")
    training_config = portable(record.training_config or {})
    extras = portable(record.extras or {})
    metrics = record.metrics or {}
    write_bundle_model_card(
        staging, training_config=training_config, base_model=base_model, metrics=metrics, extras=extras
    )  # replaces the base model's card that sentence-transformers saved
    manifest = Manifest(
        version=version,
        created_at=datetime.now(UTC),
        base_model=base_model,
        training_config=training_config,
        dim=encoder.dim,
        metric=MetricInfo(index=encoder.index_metric, similarity=encoder.metric),
        similarity=encoder.similarity,
        n_vectors=n_vectors,
        index=info,
        metrics=metrics,
        files=checksums(staging),
        code_version=code_version(),
        extras=extras,
    )
    write_json_atomic(staging / MANIFEST_FILE, manifest.model_dump(mode="json"))
    return manifest
