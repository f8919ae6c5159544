"""The live alias of a Milvus deployment: BundleStore's IndexPointer, its reconcile and sweep.

`<name>_live` is the cluster-side CURRENT pointer (contract/milvus/index.py describes the collections).
CURRENT is written first and the alias flipped after it; every operation here is idempotent, so a
process killed between the two is put right by `reconcile`, and collections of killed builds by `sweep`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from contract.errors import IndexUnavailable
from contract.index.backend import MILVUS_EXTRAS, BackendConfig, is_milvus
from contract.milvus.index import (
    VERSION_SUFFIX,
    MilvusIndex,
    check_name,
    collection_name,
    connect,
    error_brief,
)

if TYPE_CHECKING:
    from contract.bundles.bundle import Manifest

logger = logging.getLogger(__name__)


class MilvusPointer:
    """IndexPointer for BundleStore: flips the live alias when CURRENT moves, drops pruned collections.

    CURRENT is written first and the alias flipped after it, so a process killed in between leaves the
    alias on the previous collection. The flip is idempotent: `reconcile` repeats it when the alias lags,
    and the readiness check of an index opened here calls it when `current_version` (CURRENT's reader,
    set by the app) names the index's version. Checking CURRENT first keeps a replica that has not yet
    followed a newer CURRENT from flipping the alias back to its older version.
    """

    def __init__(self, config: BackendConfig, current_version: Callable[[], str | None] | None = None):
        self.config = config
        self.current_version = current_version

    def open_index(self, manifest: Manifest) -> MilvusIndex:
        index = MilvusIndex.open(self.config, manifest)
        index.reconcile = lambda: self._reconcile_if_current(manifest)
        return index

    def _reconcile_if_current(self, manifest: Manifest) -> bool:
        try:
            current = self.current_version() if self.current_version is not None else None
        except Exception as exc:  # an unreadable CURRENT: leave the alias alone, readiness says why
            logger.warning("not reconciling the Milvus alias: CURRENT is unreadable (%s)", error_brief(exc))
            return False
        if current != manifest.version:
            return False
        try:
            return self.reconcile(manifest)
        except IndexUnavailable as exc:
            logger.warning("%s", exc)
            return False

    def reconcile(self, manifest: Manifest) -> bool:
        """Point the live alias at `manifest`'s collection (CURRENT's) when it names another or none;
        True when it flipped."""
        if not is_milvus(manifest.index):
            return False
        extras = manifest.extras[MILVUS_EXTRAS]
        collection, alias = check_name(extras["collection"]), check_name(extras["alias"])
        client = connect(self.config)
        try:
            target = client.describe_alias(alias, timeout=self.config.timeout_s)["collection_name"]
        except Exception:  # no alias yet: create it
            target = None
        if target == collection:
            return False
        logger.warning(
            "Milvus alias %s names %s, CURRENT's collection is %s: flipping it", alias, target, collection
        )
        self.on_current(manifest)
        return True

    def sweep(self, versions: Callable[[], Iterable[str]], building: Callable[[], bool]) -> list[str]:
        """Drop this name's version collections whose version is not a bundle folder: left by a build
        killed before it could drop its own. `versions()` lists the folders and `building()` says whether
        another build is running (its collection has no folder yet); then nothing is dropped. Listing the
        collections first makes it safe against a build that starts meanwhile: its collection is not in
        the list, or its lock is already held when `building()` looks. Returns the dropped names."""
        name = check_name(self.config.milvus_name)
        pattern = re.compile(re.escape(name) + VERSION_SUFFIX)
        client = connect(self.config)
        try:
            listed = [c for c in client.list_collections(timeout=self.config.timeout_s) if pattern.match(c)]
        except Exception as exc:
            logger.warning("could not list Milvus collections to sweep: %s", error_brief(exc))
            return []
        if not listed or building():
            return []
        kept = {collection_name(name, v) for v in versions()}
        orphans = [c for c in listed if c not in kept]
        for collection in orphans:
            logger.info("sweeping Milvus collection %s: its version is not a bundle folder", collection)
            drop_collection(self.config, collection)
        return orphans

    def on_current(self, manifest: Manifest) -> None:
        if not is_milvus(manifest.index):
            return
        extras = manifest.extras[MILVUS_EXTRAS]
        point_alias(self.config, check_name(extras["alias"]), check_name(extras["collection"]))

    def on_delete(self, manifest: Manifest) -> None:
        if not is_milvus(manifest.index):
            return
        drop_collection(self.config, str(manifest.extras[MILVUS_EXTRAS]["collection"]))


def point_alias(config: BackendConfig, alias: str, collection: str) -> None:
    """Create Milvus alias `alias` on `collection`, or move it there (idempotent)."""
    client = connect(config)
    try:
        if alias in client.list_aliases(timeout=config.timeout_s).get("aliases", []):
            client.alter_alias(collection, alias, timeout=config.timeout_s)
        else:
            client.create_alias(collection, alias, timeout=config.timeout_s)
    except Exception as exc:
        raise IndexUnavailable(
            f"flipping Milvus alias {alias} to {collection} failed: {error_brief(exc)}"
        ) from exc
    logger.info("Milvus alias %s -> %s", alias, collection)


def drop_alias(config: BackendConfig, alias: str) -> None:
    """Drop Milvus alias `alias` if it exists (a deleted collection's or alias's)."""
    client = connect(config)
    try:
        if alias in client.list_aliases(timeout=config.timeout_s).get("aliases", []):
            client.drop_alias(alias, timeout=config.timeout_s)
    except Exception as exc:
        logger.warning("could not drop Milvus alias %s: %s", alias, error_brief(exc))


def drop_collection(config: BackendConfig, collection: str) -> None:
    """Drop a version's collection (keep-N, a failed build); a missing one is already gone."""
    client = connect(config)
    try:
        if client.has_collection(collection, timeout=config.timeout_s):
            client.drop_collection(collection, timeout=config.timeout_s)
            logger.info("dropped Milvus collection %s", collection)
    except Exception as exc:  # an alias still on it, or the server gone: leave it, say so
        logger.warning("could not drop Milvus collection %s: %s", collection, error_brief(exc))
