"""Versioned, self-describing bundles: encoder + FAISS index + documents + report, one folder each.

Contract module: the API loads bundles through it; it imports only the other contract modules.
Building one is training.bundle.build; publishing is training.bundle.store.

    <version>/manifest.json   Manifest below; `files` holds the sha256 of every other file
    <version>/model/          Encoder.save() (safetensors + similarity.json)
    <version>/index.faiss     VectorIndex.save(); row i is ids[i]
    <version>/ids.json        position -> document id
    <version>/docs.sqlite     DocStore (id, title, text, metadata) for hits and metadata filters
    <version>/report/         the training report (report.json + plots), when there was one
    <version>/gate.json       the quality-gate decision, written by BundleStore.publish before the rename

`validate` is the one check, and it is cheap (the model and the index's vectors are not loaded):
schema, checksums, files present, dim == index.d, ntotal == len(ids) == documents, known metric, the
model folder's declared dim and similarity == manifest. Publishing and activating run only it;
`load_bundle` runs it, then loads. Any failure is a `BundleInvalid` naming the file.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contract.bundles import parts as parts
from contract.bundles.parts import sha256_file
from contract.bundles.report_schema import GapReport
from contract.bundles.run_record import TrainingRecord
from contract.encoding.encoder import Encoder
from contract.encoding.shared_models import files_key, load_encoder
from contract.encoding.similarity import Similarity
from contract.errors import BundleInvalid, ModelLoadError
from contract.index.backend import IndexOpener, is_milvus
from contract.index.docstore import DocStore
from contract.index.lexical_index import LexicalIndex
from contract.index.vector_index import IndexInfo, VectorIndex

logger = logging.getLogger(__name__)

__all__ = [
    "Bundle",
    "DocStore",
    "GapReport",
    "Manifest",
    "load_bundle",
    "mismatches",
    "read_manifest",
    "validate",
]

MANIFEST_FILE = "manifest.json"
MODEL_DIR = "model"
INDEX_FILE = "index.faiss"
IDS_FILE = "ids.json"
DOCS_FILE = "docs.sqlite"
REPORT_DIR = "report"
GATE_FILE = "gate.json"
CARD_FILE = (
    "README.md"  # the bundle card (training/cards/bundle_card.py), written at publication with gate.json
)
LEXICAL_DIR = (
    "lexical"  # BM25 index (contract.index.lexical_index); bundles built before hybrid search lack it
)
UNCHECKED_FILES = {MANIFEST_FILE, GATE_FILE, CARD_FILE}  # written around the checksummed content
VERSION_RE = re.compile(r"^\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{6}$")
SCHEMA_VERSION = 1


def new_version_id(now: datetime | None = None) -> str:
    """`YYYYMMDDTHHMMSS.ffffffZ-<6 hex>`: sorts by creation time; the suffix separates equal stamps."""
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{secrets.token_hex(3)}"


class MetricInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: Literal["ip", "l2"]  # FAISS metric of index.faiss
    similarity: Literal["cosine", "aninfonce"]  # the learned similarity the scores reproduce


class CodeVersion(BaseModel):
    package: str
    git_sha: str | None = None


class Manifest(BaseModel):
    """manifest.json: everything needed to trust and serve a bundle."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    version: str
    created_at: datetime
    base_model: str
    training_config: TrainingRecord = Field(default_factory=TrainingRecord)  # the run's config.json
    dim: int = Field(gt=0)
    metric: MetricInfo
    similarity: Similarity | None = None  # the model's similarity.json; None in bundles built before it
    n_vectors: int = Field(ge=1)
    index: IndexInfo
    metrics: dict[str, dict[str, float]] = Field(default_factory=dict)  # e.g. {"test": {"ndcg@10": ...}}
    files: dict[str, str]  # relative path -> sha256
    code_version: CodeVersion
    extras: dict[str, Any] = Field(default_factory=dict)  # e.g. ONNX variants added by the API side

    @field_validator("version")
    @classmethod
    def _version_format(cls, v: str) -> str:
        if not VERSION_RE.match(v):
            raise ValueError(f"version {v!r} does not match YYYYMMDDTHHMMSS.ffffffZ-<6 hex>")
        return v


@dataclass
class Bundle:
    """A loaded, validated bundle: everything a search needs."""

    path: Path
    manifest: Manifest
    encoder: Encoder
    index: VectorIndex  # or a contract.index.backend.SearchIndex (MilvusIndex) for external indexes
    doc_ids: list[str]
    docstore: DocStore
    report: GapReport | None
    lexical: LexicalIndex | None = None  # None: a bundle from before hybrid search, served dense only
    # each manifest file's (device, inode, size, mtime) when it loaded (or was last found intact):
    # readiness and the scrub compare (parts.damaged_files, parts.verify_files)
    file_stats: dict[str, parts.FileStat] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return self.manifest.version


# -- checksums ----------------------------------------------------------------------------------------
def checksums(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` except the manifest and gate decision, by relative path."""
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).as_posix() not in UNCHECKED_FILES
    }


# -- reading ------------------------------------------------------------------------------------------
SEQ_KEY = "mutation_seq"  # manifest.extras key: the last mutation-log seq folded into the corpus


def seq_of_manifest(extras: Mapping[str, Any]) -> int:
    """The last seq folded into a bundle (0 for bundles built before the log existed)."""
    value = extras.get(SEQ_KEY, 0)
    return int(value) if isinstance(value, int) and value >= 0 else 0


def read_manifest(folder: str | Path) -> Manifest:
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        raise BundleInvalid(f"{path}: manifest is missing")
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except OSError as exc:  # a folder named manifest.json, no permission, I/O error
        raise BundleInvalid(f"{path}: manifest is unreadable ({exc.strerror or exc})") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise BundleInvalid(f"{path}: invalid manifest ({problems})") from exc


def validate(
    path: str | Path, *, checksums: bool = True, index_opener: IndexOpener | None = None
) -> Manifest:
    """The one bundle check, cheap: the model and the index's vectors are never loaded.

    Schema, listed files present, sha256 of each (`checksums=False` skips only these), ids.json,
    index header (dim, ntotal, metric; FAISS read memory-mapped), documents, lexical.json's count, and
    the model folder's declared dim and similarity — each against the manifest. Publishing and
    activating a version need nothing more; `load_bundle` runs it before loading anything.
    With `index_opener`, an index kept outside the folder (Milvus) is opened and its shape checked too.
    """
    folder = Path(path)
    manifest, _ = _validated(folder, checksums)
    if index_opener is not None and is_milvus(manifest.index):
        index = _open_external(folder, manifest, index_opener)
        _check_shape(folder / MANIFEST_FILE, manifest, index.dim, index.ntotal)
    return manifest


def _validated(folder: Path, checksums: bool) -> tuple[Manifest, list[str]]:
    if not folder.is_dir():
        raise BundleInvalid(f"{folder}: bundle folder does not exist")
    m = read_manifest(folder)
    external = is_milvus(m.index)
    required = (IDS_FILE, DOCS_FILE) if external else (INDEX_FILE, IDS_FILE, DOCS_FILE)
    parts.check_files(folder, m.files, required, MANIFEST_FILE, checksums)
    ids = parts.read_ids(folder / IDS_FILE, m.n_vectors)
    if external:
        _check_external(folder, m)
    else:
        index = parts.load_faiss(folder / INDEX_FILE, m.index, m.metric.index, mmap=True)
        _check_shape(folder / INDEX_FILE, m, index.dim, index.ntotal)
    docstore = DocStore(folder / DOCS_FILE)
    n_docs = len(docstore)
    docstore.close()
    if n_docs != m.n_vectors:
        raise BundleInvalid(f"{folder / DOCS_FILE}: {n_docs} documents, manifest says {m.n_vectors}")
    parts.check_model_files(
        folder / MODEL_DIR, dim=m.dim, similarity=m.metric.similarity, index_metric=m.metric.index
    )
    if _has_lexical(m):
        parts.check_lexical_record(folder / LEXICAL_DIR, m.n_vectors)
    return m, ids


def load_bundle(
    path: str | Path, *, verify: bool = True, mmap: bool = False, index_opener: IndexOpener | None = None
) -> Bundle:
    """`validate` the folder, then load it; `verify=False` skips only the sha256 checksums.

    `index_opener` opens an index kept outside the folder (a Milvus collection, contract.milvus.index);
    a bundle whose manifest says its index is elsewhere cannot load without one.
    """
    folder = Path(path)
    m, ids = _validated(folder, verify)
    stats = parts.file_stats(folder, m.files)
    if is_milvus(m.index):
        index = _open_external(folder, m, index_opener)
    else:
        index = parts.load_faiss(folder / INDEX_FILE, m.index, m.metric.index, mmap=mmap)
    try:  # one loaded copy per distinct model in the process (collections built from one encoder share it)
        encoder = load_encoder(folder / MODEL_DIR, files_key(m.files, MODEL_DIR + "/", skip=("onnx",)))
    except ModelLoadError as exc:
        raise BundleInvalid(f"{folder / MODEL_DIR}: {exc}") from exc
    report = parts.read_report(folder / REPORT_DIR / "report.json")
    lexical = parts.read_lexical(folder / LEXICAL_DIR, m.n_vectors) if _has_lexical(m) else None
    bundle = Bundle(folder, m, encoder, index, ids, DocStore(folder / DOCS_FILE), report, lexical, stats)
    problems = mismatches(bundle)
    if problems:  # what the files declared and what loaded disagree (an unusual model layout, say)
        bundle.docstore.close()
        raise BundleInvalid(f"{folder}: " + "; ".join(problems))
    logger.info("loaded bundle %s (%d vectors, %s)", m.version, m.n_vectors, m.index.factory)
    return bundle


def mismatches(bundle: Bundle) -> list[str]:
    """Why a loaded bundle's parts might not belong together (empty = consistent); /readyz asks too."""
    m, encoder = bundle.manifest, bundle.encoder
    problems = parts.shape_problems(
        bundle.index.dim, bundle.index.ntotal, manifest_dim=m.dim, manifest_n=m.n_vectors
    )
    if encoder.dim != m.dim:
        problems.append(f"encoder dim {encoder.dim} != manifest dim {m.dim}")
    if encoder.metric != m.metric.similarity or encoder.index_metric != m.metric.index:
        problems.append(
            f"encoder similarity {encoder.metric} does not match manifest "
            f"{m.metric.similarity}/{m.metric.index}"
        )
    if not (len(bundle.doc_ids) == len(bundle.docstore) == m.n_vectors):
        problems.append(
            f"ids {len(bundle.doc_ids)}, documents {len(bundle.docstore)}, manifest {m.n_vectors}"
        )
    return problems


def _check_shape(where: Path, m: Manifest, dim: int, ntotal: int) -> None:
    shape = parts.shape_problems(dim, ntotal, manifest_dim=m.dim, manifest_n=m.n_vectors)
    if shape:
        raise BundleInvalid(f"{where}: " + "; ".join(shape))


def _has_lexical(manifest: Manifest) -> bool:
    return any(rel.startswith(LEXICAL_DIR + "/") for rel in manifest.files)


def _check_external(folder: Path, manifest: Manifest) -> None:
    if manifest.index.metric != manifest.metric.index:
        raise BundleInvalid(
            f"{folder / MANIFEST_FILE}: index metric {manifest.index.metric} != {manifest.metric.index}"
        )


def _open_external(folder: Path, manifest: Manifest, opener: IndexOpener | None) -> Any:
    if opener is None:
        raise BundleInvalid(
            f"{folder / MANIFEST_FILE}: its index is a Milvus collection ({manifest.index.factory}); "
            "serve it with SEARCH_INDEX_BACKEND=milvus and SEARCH_MILVUS_URI"
        )
    return opener(manifest)
