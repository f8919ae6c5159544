"""A bundle's files read and checked one at a time, each against the numbers the manifest states.

contract.bundles.bundle's `validate` and `load_bundle` call these with the manifest's values; nothing here
knows the Manifest type (so this module sits below contract.bundles.bundle, not beside it). Every failure is a
`BundleInvalid` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pydantic import ValidationError

from contract.bundles.report_schema import GapReport
from contract.encoding.encoder import model_dim_on_disk, similarity_on_disk
from contract.errors import BundleInvalid, IndexBuildError, ModelLoadError
from contract.index.lexical_index import PARAMS_FILE as LEXICAL_PARAMS_FILE
from contract.index.lexical_index import LexicalIndex
from contract.index.vector_index import IndexInfo, VectorIndex, metric_of


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_files(
    folder: Path, files: dict[str, str], required: tuple[str, ...], manifest_file: str, checksums: bool
) -> None:
    """Every required file listed and present; every listed file present and (`checksums`) intact."""
    for name in required:
        if name not in files:
            raise BundleInvalid(f"{folder / manifest_file}: files does not list {name}")
        if not (folder / name).is_file():
            raise BundleInvalid(f"{folder / name}: missing")
    for rel, digest in files.items():
        file = folder / rel
        if not file.is_file():
            raise BundleInvalid(f"{file}: listed in the manifest but missing")
        if checksums and sha256_file(file) != digest:
            raise BundleInvalid(f"{file}: checksum mismatch (corrupt or modified after publication)")


FileStat = tuple[int, int, int, int]  # (device, inode, size, mtime ns)


def stat_of(path: Path) -> FileStat:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def file_stats(folder: Path, files: dict[str, str]) -> dict[str, FileStat]:
    """What each listed file is on disk now: taken when a bundle loads, compared while it serves."""
    return {rel: stat_of(folder / rel) for rel in files}


def changed_files(folder: Path, stats: dict[str, FileStat]) -> list[str]:
    """Files (relative) whose stat is not what was loaded any more: touched, replaced, truncated, gone.

    A stat per file, so readiness can afford it on every probe. A changed stat is only a reason to look
    (`damaged_files`): `touch` changes the mtime and not one byte."""
    changed = []
    for rel, was in stats.items():
        try:
            now = stat_of(folder / rel)
        except OSError:
            changed.append(rel)
            continue
        if now != was:
            changed.append(rel)
    return changed


def intact(folder: Path, rel: str, digest: str | None, stats: dict[str, FileStat]) -> bool:
    """Whether `rel` still holds the bytes the manifest's sha256 names; when it does, its stat now is
    remembered in `stats` (so a touched file is hashed once, not on every probe).

    Gone, or a size other than at load, is damage without hashing; otherwise the whole file is hashed
    (bench/index/scrub_bench.py measures what that costs). The stat is taken before the hash, so a change
    made while hashing is seen again at the next look."""
    path = folder / rel
    try:
        now = stat_of(path)
        was = stats.get(rel)
        if digest is None or (was is not None and now[2] != was[2]):
            return False
        if sha256_file(path) != digest:
            return False
    except OSError:  # removed meanwhile, unreadable
        return False
    stats[rel] = now
    return True


def damaged_files(folder: Path, files: dict[str, str], stats: dict[str, FileStat]) -> list[str]:
    """Of the files whose stat changed since load (changed_files), those whose content did too: gone,
    resized, or not the manifest's sha256. Readiness asks on every probe; unchanged files cost a stat."""
    return [rel for rel in changed_files(folder, stats) if not intact(folder, rel, files.get(rel), stats)]


def verify_files(folder: Path, files: dict[str, str], stats: dict[str, FileStat]) -> list[str]:
    """Every listed file hashed against the manifest (the scrub: a flipped byte keeps size and mtime, so
    no stat shows it); returns the damaged ones."""
    return [rel for rel, digest in files.items() if not intact(folder, rel, digest, stats)]


def read_ids(path: Path, n: int) -> list[str]:
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


def shape_problems(dim: int, ntotal: int, *, manifest_dim: int, manifest_n: int) -> list[str]:
    """An index's (or a loaded bundle's) dimension and row count against the manifest's."""
    problems = []
    if dim != manifest_dim:
        problems.append(f"index dim {dim} != manifest dim {manifest_dim}")
    if ntotal != manifest_n:
        problems.append(f"{ntotal} vectors, manifest says {manifest_n}")
    return problems


def load_faiss(path: Path, info: IndexInfo, index_metric: str, *, mmap: bool) -> VectorIndex:
    """index.faiss with the manifest's search parameters; its metric must be the manifest's."""
    try:
        index = VectorIndex.load(path, info, mmap=mmap)
    except IndexBuildError as exc:
        raise BundleInvalid(str(exc)) from exc
    found = metric_of(index.index)
    if found != index_metric or info.metric != index_metric:
        raise BundleInvalid(f"{path}: metric {found} != manifest {index_metric}")
    return index


def check_model_files(model_dir: Path, *, dim: int, similarity: str, index_metric: str) -> None:
    """The model folder's declared size and similarity against the manifest, without loading it."""
    if not (model_dir / "modules.json").exists() and not (model_dir / "config.json").exists():
        raise BundleInvalid(f"{model_dir} is not a sentence-transformers model folder (no modules.json)")
    try:
        declared = similarity_on_disk(model_dir)
    except ModelLoadError as exc:
        raise BundleInvalid(f"{model_dir}: {exc}") from exc
    model_dim = model_dim_on_disk(model_dir)
    if model_dim is not None and model_dim != dim:
        raise BundleInvalid(f"{model_dir}: encoder dim {model_dim} != manifest dim {dim}")
    declared_index = declared.index_metric
    if declared.metric != similarity or declared_index != index_metric:
        raise BundleInvalid(
            f"{model_dir}: encoder similarity {declared.metric} does not match manifest "
            f"{similarity}/{index_metric}"
        )
    if declared.lam is not None and len(declared.lam) != dim:
        raise BundleInvalid(f"{model_dir}: lambda has {len(declared.lam)} entries, manifest dim is {dim}")


def check_lexical_record(lexical_dir: Path, n: int) -> None:
    """lexical.json's document count (the BM25 arrays are checked against it when they load)."""
    try:
        n_docs = json.loads((lexical_dir / LEXICAL_PARAMS_FILE).read_text(encoding="utf-8")).get("n_docs")
    except (OSError, ValueError, AttributeError) as exc:
        raise BundleInvalid(f"{lexical_dir}: lexical index does not load ({exc})") from exc
    if n_docs != n:
        raise BundleInvalid(f"{lexical_dir}: {n_docs} documents, manifest says {n}")


def read_lexical(lexical_dir: Path, n: int) -> LexicalIndex:
    try:
        lexical = LexicalIndex.load(lexical_dir)
    except (OSError, ValueError) as exc:
        raise BundleInvalid(f"{lexical_dir}: lexical index does not load ({exc})") from exc
    if lexical.n_docs != n:
        raise BundleInvalid(f"{lexical_dir}: {lexical.n_docs} documents, manifest says {n}")
    return lexical


def read_report(path: Path) -> GapReport | None:
    if not path.is_file():
        return None
    try:
        return GapReport.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise BundleInvalid(f"{path}: not a valid gap report ({exc.errors()[0]['msg']})") from exc
