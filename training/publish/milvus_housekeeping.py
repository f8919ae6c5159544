"""Milvus housekeeping at publish time (training.publish.index_model calls both around BundleStore.publish).

- `reconcile_live_alias`: CURRENT is written before the live alias is flipped, so a publisher killed in
  between leaves the alias on the previous collection; the flip is idempotent and is repeated here (and
  by the readiness check of an API replica serving CURRENT's version, contract.milvus.index).
- `unpublished_collection_dropped`: a failed or cancelled build drops the collection it created.
- `sweep_orphan_collections`: a build killed after creating its collection (before it could drop it)
  leaves a collection whose version is no bundle folder; it is dropped unless another build is running.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from contract.bundles.bundle import MANIFEST_FILE, VERSION_RE, read_manifest
from contract.bundles.folder import BundleFolder
from contract.index.backend import MILVUS_EXTRAS, BackendConfig
from contract.milvus.pointer import MilvusPointer, drop_collection
from training.bundle.store import BUILD_PREFIX


def reconcile_live_alias(store: BundleFolder, pointer: MilvusPointer) -> bool:
    """Point the live alias at CURRENT's collection if a publisher died between writing CURRENT and
    flipping it (the flip is idempotent). True when it flipped."""
    current = store.current_version()
    if current is None:
        return False
    return pointer.reconcile(read_manifest(store.root / current))


def sweep_orphan_collections(
    store: BundleFolder, pointer: MilvusPointer, own_builds: Iterable[Path]
) -> list[str]:
    """Drop collections of versions that are not bundle folders (builds killed before they could drop
    theirs), unless a build other than `own_builds` (this process's build folders) is running."""
    own = {Path(p).with_name(Path(p).name + ".lock") for p in own_builds}

    def versions() -> list[str]:
        return [p.name for p in store.root.iterdir() if p.is_dir() and VERSION_RE.match(p.name)]

    return pointer.sweep(versions, lambda: _other_build_running(store.root, own))


def _other_build_running(root: Path, own: set[Path]) -> bool:
    """A `.build-*.lock` (training.bundle.store.BundleStore.build_dir) held by another builder."""
    for lock in root.glob(BUILD_PREFIX + "*.lock"):
        if lock in own:
            continue
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also releases the probe's lock
    return False


@contextmanager
def unpublished_collection_dropped(backend: BackendConfig | None, staging: Path) -> Iterator[None]:
    """A failed or cancelled Milvus build drops the collection it created, unless the version got published
    (the rename happened: the version folder owns its collection, keep-N drops it later)."""
    try:
        yield
    except BaseException:
        manifest_path = staging / MANIFEST_FILE
        if backend is not None and manifest_path.is_file():
            collection = read_manifest(staging).extras.get(MILVUS_EXTRAS, {}).get("collection")
            if collection:
                drop_collection(backend, collection)
        raise
