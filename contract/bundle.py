"""Versioned, self-describing bundles: encoder + FAISS index + documents + report, one folder each.

Contract module: the API loads bundles through it; it imports only the other contract modules.
Building one is training.bundle_build; publishing is training.bundle_store.

    <version>/manifest.json   Manifest below; `files` holds the sha256 of every other file
    <version>/model/          Encoder.save() (safetensors + similarity.json)
    <version>/index.faiss     VectorIndex.save(); row i is ids[i]
    <version>/ids.json        position -> document id
    <version>/docs.sqlite     DocStore (id, title, text, metadata) for hits and metadata filters
    <version>/report/         the training report (report.json + plots), when there was one
    <version>/gate.json       the quality-gate decision, written by BundleStore.publish before the rename

`load_bundle` checks everything it can before anything is served: schema, checksums, dim == index.d,
ntotal == len(ids) == documents, known metric, encoder dim and similarity == manifest. Any failure is a
`BundleInvalid` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contract.docstore import DocStore
from contract.encoder import Encoder
from contract.errors import BundleInvalid, IndexBuildError, ModelLoadError
from contract.index_backend import IndexOpener, is_milvus
from contract.lexical_index import LexicalIndex
from contract.report_schema import GapReport
from contract.run_record import TrainingRecord
from contract.similarity import Similarity
from contract.vector_index import IndexInfo, VectorIndex

logger = logging.getLogger(__name__)

__all__ = ["Bundle", "DocStore", "GapReport", "Manifest", "load_bundle", "read_manifest"]

MANIFEST_FILE = "manifest.json"
MODEL_DIR = "model"
INDEX_FILE = "index.faiss"
IDS_FILE = "ids.json"
DOCS_FILE = "docs.sqlite"
REPORT_DIR = "report"
GATE_FILE = "gate.json"
CARD_FILE = "README.md"  # the bundle card (training/bundle_card.py), written at publication with gate.json
LEXICAL_DIR = "lexical"  # BM25 index (contract.lexical_index); bundles built before hybrid search lack it
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
    index: VectorIndex  # or a contract.index_backend.SearchIndex (MilvusIndex) for external indexes
    doc_ids: list[str]
    docstore: DocStore
    report: GapReport | None
    lexical: LexicalIndex | None = None  # None: a bundle from before hybrid search, served dense only

    @property
    def version(self) -> str:
        return self.manifest.version


# -- checksums ----------------------------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checksums(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` except the manifest and gate decision, by relative path."""
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).as_posix() not in UNCHECKED_FILES
    }


# -- reading ------------------------------------------------------------------------------------------
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


def load_bundle(
    path: str | Path, *, verify: bool = True, mmap: bool = False, index_opener: IndexOpener | None = None
) -> Bundle:
    """Load and validate a bundle folder; `verify=False` skips only the sha256 checksums.

    `index_opener` opens an index kept outside the folder (a Milvus collection, contract.milvus_index);
    a bundle whose manifest says its index is elsewhere cannot load without one.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise BundleInvalid(f"{folder}: bundle folder does not exist")
    manifest = read_manifest(folder)
    external = is_milvus(manifest.index)
    for required in (IDS_FILE, DOCS_FILE) if external else (INDEX_FILE, IDS_FILE, DOCS_FILE):
        if required not in manifest.files:
            raise BundleInvalid(f"{folder / MANIFEST_FILE}: files does not list {required}")
        if not (folder / required).is_file():
            raise BundleInvalid(f"{folder / required}: missing")
    if verify:
        for rel, digest in manifest.files.items():
            file = folder / rel
            if not file.is_file():
                raise BundleInvalid(f"{file}: listed in the manifest but missing")
            if sha256_file(file) != digest:
                raise BundleInvalid(f"{file}: checksum mismatch (corrupt or modified after publication)")
    ids = _read_ids(folder / IDS_FILE, manifest.n_vectors)
    if external:
        index = _open_external(folder, manifest, index_opener)
    else:
        index = _load_faiss(folder, manifest, mmap)
    if index.dim != manifest.dim:
        raise BundleInvalid(f"{folder / INDEX_FILE}: index dim {index.dim} != manifest dim {manifest.dim}")
    if index.ntotal != manifest.n_vectors:
        raise BundleInvalid(
            f"{folder / INDEX_FILE}: {index.ntotal} vectors, manifest says {manifest.n_vectors}"
        )
    docstore = DocStore(folder / DOCS_FILE)
    if len(docstore) != manifest.n_vectors:
        raise BundleInvalid(
            f"{folder / DOCS_FILE}: {len(docstore)} documents, manifest says {manifest.n_vectors}"
        )
    try:
        encoder = Encoder.load(folder / MODEL_DIR)
    except ModelLoadError as exc:
        raise BundleInvalid(f"{folder / MODEL_DIR}: {exc}") from exc
    if encoder.dim != manifest.dim:
        raise BundleInvalid(f"{folder / MODEL_DIR}: encoder dim {encoder.dim} != manifest dim {manifest.dim}")
    if encoder.metric != manifest.metric.similarity or encoder.index_metric != manifest.metric.index:
        raise BundleInvalid(
            f"{folder / MODEL_DIR}: encoder similarity {encoder.metric} does not match manifest "
            f"{manifest.metric.similarity}/{manifest.metric.index}"
        )
    report = _read_report(folder / REPORT_DIR / "report.json")
    lexical = _read_lexical(folder, manifest)
    logger.info(
        "loaded bundle %s (%d vectors, %s)", manifest.version, manifest.n_vectors, manifest.index.factory
    )
    return Bundle(folder, manifest, encoder, index, ids, docstore, report, lexical)


def _read_lexical(folder: Path, manifest: Manifest) -> LexicalIndex | None:
    listed = any(rel.startswith(LEXICAL_DIR + "/") for rel in manifest.files)
    if not listed:
        return None
    try:
        lexical = LexicalIndex.load(folder / LEXICAL_DIR)
    except (OSError, ValueError) as exc:
        raise BundleInvalid(f"{folder / LEXICAL_DIR}: lexical index does not load ({exc})") from exc
    if lexical.n_docs != manifest.n_vectors:
        raise BundleInvalid(
            f"{folder / LEXICAL_DIR}: {lexical.n_docs} documents, manifest says {manifest.n_vectors}"
        )
    return lexical


def _load_faiss(folder: Path, manifest: Manifest, mmap: bool) -> VectorIndex:
    try:
        index = VectorIndex.load(folder / INDEX_FILE, manifest.index, mmap=mmap)
    except IndexBuildError as exc:
        raise BundleInvalid(str(exc)) from exc
    index_metric = "l2" if index.index.metric_type == 1 else "ip"  # faiss.METRIC_L2 == 1
    if index_metric != manifest.metric.index or manifest.index.metric != manifest.metric.index:
        raise BundleInvalid(
            f"{folder / INDEX_FILE}: metric {index_metric} != manifest {manifest.metric.index}"
        )
    return index


def _open_external(folder: Path, manifest: Manifest, opener: IndexOpener | None) -> Any:
    if opener is None:
        raise BundleInvalid(
            f"{folder / MANIFEST_FILE}: its index is a Milvus collection ({manifest.index.factory}); "
            "serve it with SEARCH_INDEX_BACKEND=milvus and SEARCH_MILVUS_URI"
        )
    if manifest.index.metric != manifest.metric.index:
        raise BundleInvalid(
            f"{folder / MANIFEST_FILE}: index metric {manifest.index.metric} != {manifest.metric.index}"
        )
    return opener(manifest)


def _read_ids(path: Path, n: int) -> list[str]:
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleInvalid(f"{path}: invalid JSON ({exc})") from exc
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BundleInvalid(f"{path}: expected a JSON list of document id strings")
    if len(ids) != n:
        raise BundleInvalid(f"{path}: {len(ids)} ids, manifest says {n} vectors")
    if len(set(ids)) != len(ids):
        raise BundleInvalid(f"{path}: duplicate document ids")
    return ids


def _read_report(path: Path) -> GapReport | None:
    if not path.is_file():
        return None
    try:
        return GapReport.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise BundleInvalid(f"{path}: not a valid gap report ({exc.errors()[0]['msg']})") from exc
