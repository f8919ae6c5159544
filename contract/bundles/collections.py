"""Collections: many bundles folders under one root, and aliases that name them.

A collection is exactly what a bundles folder is (contract/bundles/folder.py: versions, CURRENT, the gate
log, the mutation log, the job lock, the cards); this module only says where each one lives, which names
are allowed and which alias points where.

    <bundles_dir>/                  the `default` collection: SEARCH_BUNDLES_DIR, as before collections
    <root>/<name>/                  a named collection (root: SEARCH_COLLECTIONS_ROOT, default
                                    <bundles_dir>/collections)
    <root>/<name>/collection.json   when it was created (and from which dataset, when it was)
    <root>/aliases.json             {alias: collection}, replaced atomically: one os.replace per change
    <root>/.lock                    fcntl lock held while a name is created, deleted or re-pointed

Names match `^[a-z0-9][a-z0-9_-]{0,62}$` (so never `..`, a separator or a non-ASCII letter), collections
and aliases share one namespace, and a named collection's folder must be a real folder directly under the
root (a symbolic link leading elsewhere is refused, as dataset files are: contract/jobs/confine.py). An
alias names a collection, never another alias, so resolving one is one lookup and no loop can form.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.atomic import fsync_dir, write_json_atomic
from contract.defaults import DEFAULT_COLLECTION
from contract.errors import CollectionConflict, CollectionNotFound, CollectionRefused

logger = logging.getLogger(__name__)

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
NAME_RE = re.compile(NAME_PATTERN)
DEFAULT_ROOT_NAME = "collections"  # under the default collection's folder unless SEARCH_COLLECTIONS_ROOT says
ALIASES_FILE = "aliases.json"
META_FILE = "collection.json"
LOCK_FILE = ".lock"
TRASH_PREFIX = ".trash-"
MILVUS_NAME_MAX = 64  # contract/milvus/expressions.py NAME_RE


def check_name(name: str, what: str = "collection") -> str:
    """`name` when it is a collection (or alias) name; CollectionRefused saying why otherwise."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        shown = name if isinstance(name, str) and len(name) <= 80 else f"{str(name)[:80]}…"
        raise CollectionRefused(
            f"{what} name {shown!r}: use 1-63 lower-case ASCII letters, digits, '_' and '-', starting with a "
            "letter or digit (no '/', '..', spaces or other characters)"
        )
    return name


def default_root(bundles_dir: str | Path) -> Path:
    return Path(bundles_dir) / DEFAULT_ROOT_NAME


def collection_milvus_name(base: str, collection: str) -> str:
    """The Milvus name prefix of collection `collection`: `<base>_<collection>`, so its versions are
    `<base>_<collection>_v<version>` and its live alias `<base>_<collection>_live` (contract/milvus/index.py);
    `default` keeps `<base>`, the names from before collections. Milvus names allow no '-' and at most 64
    characters here: a name with '-' (or too long) gets '_' for it plus a short hash of the original, so
    two collections never share Milvus names."""
    if collection == DEFAULT_COLLECTION:
        return base
    slug = collection.replace("-", "_")
    if slug != collection or len(base) + 1 + len(slug) > MILVUS_NAME_MAX:
        digest = hashlib.sha256(collection.encode()).hexdigest()[:8]
        slug = f"{slug[: MILVUS_NAME_MAX - len(base) - 10]}_{digest}"
    return f"{base}_{slug}"


class Collections:
    """The collections under one root plus the default one, and the aliases file. Reads take no lock;
    every change of a name (create, delete, alias) holds `<root>/.lock`, so two processes never both
    take one name."""

    def __init__(self, root: str | Path | None, default_dir: str | Path):
        self.default_dir = Path(default_dir)
        self.root = Path(root) if root is not None else default_root(self.default_dir)
        self._aliases: tuple[tuple[int, int, int], dict[str, str]] | None = None

    # -- names and folders ------------------------------------------------------------------------------
    def folder(self, name: str, *, must_exist: bool = True) -> Path:
        """The bundles folder of collection `name` (not an alias): the default one is SEARCH_BUNDLES_DIR."""
        check_name(name)
        if name == DEFAULT_COLLECTION:
            return self.default_dir
        path = self.root / name
        if path.is_symlink() or (
            path.exists() and os.path.realpath(path) != os.path.join(os.path.realpath(self.root), name)
        ):
            raise CollectionRefused(f"collection {name!r}: its folder leads out of the collections root")
        if must_exist and not path.is_dir():
            raise CollectionNotFound(f"no collection named {name!r}")
        return path

    def exists(self, name: str) -> bool:
        if name == DEFAULT_COLLECTION:
            return True
        try:
            self.folder(name)
        except (CollectionNotFound, CollectionRefused):
            return False
        return True

    def names(self) -> list[str]:
        """`default` first, then every named collection, sorted (hidden, odd and linked folders skipped)."""
        found = []
        if self.root.is_dir():
            for path in self.root.iterdir():
                name = path.name
                ok = NAME_RE.fullmatch(name) and path.is_dir() and not path.is_symlink()
                if ok and name != DEFAULT_COLLECTION:
                    found.append(name)
        return [DEFAULT_COLLECTION, *sorted(found)]

    def meta(self, name: str) -> dict[str, Any]:
        """What collection.json says (empty for `default` and for folders made by hand)."""
        if name == DEFAULT_COLLECTION:
            return {}
        try:
            data = json.loads((self.folder(name) / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # -- changing names ---------------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK_FILE, "a+") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def create(self, name: str, meta: dict[str, Any] | None = None) -> Path:
        """Make an empty collection (a bundles folder with nothing published yet)."""
        check_name(name)
        if name == DEFAULT_COLLECTION:
            raise CollectionConflict(f"collection {name!r} always exists (it is SEARCH_BUNDLES_DIR)")
        with self._locked():
            if name in self._read_aliases():
                raise CollectionConflict(f"{name!r} is an alias; delete the alias first or pick another name")
            path = self.folder(name, must_exist=False)
            try:
                path.mkdir()
            except FileExistsError:
                raise CollectionConflict(f"collection {name!r} already exists") from None
            record = {"name": name, "created_at": datetime.now(UTC).isoformat(), **(meta or {})}
            write_json_atomic(path / META_FILE, record)
            fsync_dir(self.root)
        logger.info("created collection %s", name)
        return path

    def retire(self, name: str) -> Path:
        """Take collection `name` out of the namespace in one rename (readers see it or nothing) and return
        where its files now are, for `purge`. Refused for `default` and while an alias names it; the
        caller refuses first while jobs run (it has the job store)."""
        check_name(name)
        if name == DEFAULT_COLLECTION:
            raise CollectionConflict("the default collection (SEARCH_BUNDLES_DIR) cannot be deleted")
        with self._locked():
            path = self.folder(name)
            using = sorted(a for a, c in self._read_aliases().items() if c == name)
            if using:
                raise CollectionConflict(
                    f"collection {name!r} is the target of alias(es) {', '.join(using)}: "
                    "point them elsewhere or delete them first"
                )
            trash = self.root / f"{TRASH_PREFIX}{name}-{secrets.token_hex(4)}"
            os.rename(path, trash)
            fsync_dir(self.root)
        logger.info("deleted collection %s", name)
        return trash

    def purge(self, trash: Path) -> None:
        """Remove a retired collection's files (and any left by a crash between retire and purge)."""
        shutil.rmtree(trash, ignore_errors=True)

    def purge_stale(self) -> None:
        if self.root.is_dir():
            for path in self.root.iterdir():
                if path.name.startswith(TRASH_PREFIX) and path.is_dir():
                    self.purge(path)

    # -- aliases ----------------------------------------------------------------------------------------
    def aliases(self) -> dict[str, str]:
        """{alias: collection}, re-read whenever the file changed (another process may have flipped it)."""
        path = self.root / ALIASES_FILE
        try:
            st = path.stat()
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._aliases is None or self._aliases[0] != stamp:
            self._aliases = (stamp, self._read_aliases())
        return dict(self._aliases[1])

    def _read_aliases(self) -> dict[str, str]:
        path = self.root / ALIASES_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.error("%s is unreadable, no alias resolves: %s", ALIASES_FILE, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            str(a): str(c)
            for a, c in data.items()
            if isinstance(c, str) and NAME_RE.fullmatch(str(a)) and NAME_RE.fullmatch(c)
        }

    def set_alias(self, alias: str, collection: str) -> str | None:
        """Point `alias` at `collection` (one atomic replace of aliases.json); returns the previous target.

        Refused: a name that is a collection, a target that is an alias (alias → alias) or no collection."""
        check_name(alias, "alias")
        check_name(collection)
        with self._locked():
            current = self._read_aliases()
            if alias == DEFAULT_COLLECTION or self.exists(alias):
                raise CollectionConflict(f"{alias!r} is a collection; an alias needs a name of its own")
            if collection in current:
                raise CollectionConflict(
                    f"{collection!r} is an alias: an alias must name a collection, not another alias "
                    f"(point {alias!r} at {current[collection]!r} instead)"
                )
            if not self.exists(collection):
                raise CollectionNotFound(f"no collection named {collection!r}")
            previous = current.get(alias)
            current[alias] = collection
            self._write_aliases(current)
        logger.info("alias %s -> %s (was %s)", alias, collection, previous)
        return previous

    def remove_alias(self, alias: str) -> str:
        """Delete `alias`; returns the collection it named."""
        check_name(alias, "alias")
        with self._locked():
            current = self._read_aliases()
            if alias not in current:
                raise CollectionNotFound(f"no alias named {alias!r}")
            target = current.pop(alias)
            self._write_aliases(current)
        logger.info("alias %s removed (was -> %s)", alias, target)
        return target

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        write_json_atomic(self.root / ALIASES_FILE, dict(sorted(aliases.items())))
        with contextlib.suppress(OSError):
            fsync_dir(self.root)
        self._aliases = None

    def resolve(self, name: str) -> tuple[str, str | None]:
        """(collection, the alias it was reached through or None) for a collection or alias name."""
        check_name(name)
        if name == DEFAULT_COLLECTION:
            return name, None
        target = self.aliases().get(name)
        path = self.root / name
        if target is not None and not path.is_dir() and not path.is_symlink():
            return target, name
        try:
            self.folder(name)  # CollectionRefused for a folder that leads out of the root
        except CollectionNotFound:
            raise CollectionNotFound(f"no collection or alias named {name!r}") from None
        return name, None
