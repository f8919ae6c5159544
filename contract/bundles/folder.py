"""BundleFolder: the published side of a bundles folder — which version is live, which exist, rolling
back or forward. The API reads and activates through it; training.bundle.store.BundleStore adds
publishing, the quality gate and pruning on top.

    <root>/CURRENT       one line: the live version id (replaced atomically, never edited)
    <root>/<version>/    published bundles; a published version is never modified
    <root>/gate.jsonl    append-only log of gate decisions and activations
    <root>/.lock         fcntl lock held around publish / activate / prune
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices, BaseModel, Field

from contract.atomic import fsync_dir, write_text_atomic
from contract.bundles.bundle import (
    GATE_FILE,
    VERSION_RE,
    Bundle,
    load_bundle,
    read_manifest,
    seq_of_manifest,
    validate,
)
from contract.errors import BundleInvalid, BundleNotFound, NoLiveBundle

if TYPE_CHECKING:
    from contract.index.backend import IndexOpener, IndexPointer

logger = logging.getLogger(__name__)

CURRENT_FILE = "CURRENT"
GATE_LOG = "gate.jsonl"
GATE_LOG_MAX_BYTES = 1 << 20  # gate.jsonl is rotated to gate.jsonl.1 beyond this (thousands of decisions)
LOCK_FILE = ".lock"


# CURRENT holds a version id and a newline; anything longer is not a pointer (read no further than this)
CURRENT_MAX_BYTES = 64


def read_current(path: Path) -> str | None:
    """The version id in a CURRENT file: None when there is none (missing or empty), BundleInvalid otherwise.

    CURRENT is read as a version id only, never as text to pass on: GET /bundles is public, so a pointer
    that is a link, not a regular file, too long or not a version id is refused with a message that holds
    none of its bytes (a link to /etc/os-release must not be echoed). O_NOFOLLOW refuses the link itself,
    O_NONBLOCK keeps a FIFO named CURRENT from hanging the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BundleInvalid(f"{CURRENT_FILE} is a link, not a version id (refused)") from None
        raise BundleInvalid(f"{CURRENT_FILE} is unreadable ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BundleInvalid(f"{CURRENT_FILE} is unreadable (not a regular file)")
        data = os.read(fd, CURRENT_MAX_BYTES + 1)
    except OSError as exc:  # an I/O error
        raise BundleInvalid(f"{CURRENT_FILE} is unreadable ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > CURRENT_MAX_BYTES:
        raise BundleInvalid(f"{CURRENT_FILE} is not a version id ({st.st_size} bytes)")
    try:
        version = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BundleInvalid(f"{CURRENT_FILE} is not a version id ({len(data)} bytes, not text)") from None
    if version and not VERSION_RE.match(version):
        raise BundleInvalid(f"{CURRENT_FILE} is not a version id ({len(data)} bytes)")
    return version or None


class GateDecision(BaseModel):
    """The gate's verdict on one candidate. Whether a version *is* live is never stored: CURRENT says it
    (a crash between logging the decision and writing CURRENT leaves an accepted version not live)."""

    version: str
    # records written before this field was renamed say "live"
    accepted: bool = Field(validation_alias=AliasChoices("accepted", "live"))
    reason: str
    metric: str
    candidate_value: float | None = None
    live_version: str | None = None
    live_value: float | None = None
    tolerance: float
    forced: bool = False
    decided_at: datetime
    # sha256 of the evaluation set (corpus, queries, qrels) the candidate's metrics come from; the gate
    # compares values only between bundles evaluated on the same set
    eval_fingerprint: str | None = None
    live_eval_fingerprint: str | None = None
    # the search mode each side serves by default: metrics["test"] are that mode's (training.hybrid.lexical_step)
    candidate_mode: str = "dense"
    live_mode: str | None = None


class VersionInfo(BaseModel):
    version: str
    live: bool
    created_at: datetime
    metrics: dict[str, dict[str, float]]
    gate: GateDecision | None = None
    # default mode, fusion parameters and their validation scores (training.hybrid.lexical_step); None: dense only
    retrieval: dict[str, Any] | None = None
    mutation_seq: int = 0  # last mutation-log seq folded into it (contract/mutations/log.py)


class BundleFolder:
    """A folder of published bundle versions with one live version."""

    def __init__(
        self,
        root: str | Path,
        gate_log_max_bytes: int = GATE_LOG_MAX_BYTES,
        pointer: IndexPointer | None = None,
    ):
        self.root = Path(root)
        # told after CURRENT moves (Milvus flips its live alias) and before a version is pruned (drops
        # its collection); a crash before it leaves the backend's pointer on the old version
        self.pointer = pointer
        self.gate_log_max_bytes = gate_log_max_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        self._reported: set[tuple[str, str]] = set()

    # -- reading ------------------------------------------------------------------------------------
    def current_version(self) -> str | None:
        """The version CURRENT names; None when there is no CURRENT; BundleInvalid when it is unreadable."""
        return read_current(self.root / CURRENT_FILE)

    def version_path(self, version: str) -> Path:
        if not VERSION_RE.match(version):
            raise BundleNotFound(f"{version!r} is not a bundle version id")
        path = self.root / version
        if not path.is_dir():
            # the API answers with this message: it names no server path
            raise BundleNotFound(f"no bundle version {version} in the bundles folder")
        return path

    def list_versions(self, problems: list[tuple[str, str]] | None = None) -> list[VersionInfo]:
        """Published versions, oldest first (hidden staging folders are never listed).

        A version whose manifest is unreadable is left out, and one whose gate.json is unreadable is
        listed without its decision; both are appended to `problems` as (version, reason) when given.
        """
        try:
            live = self.current_version()
        except BundleInvalid:
            live = None
        out = []
        for path in sorted(self.root.iterdir()):
            if not path.is_dir() or not VERSION_RE.match(path.name):
                continue
            try:
                manifest = read_manifest(path)
            except BundleInvalid as exc:
                self._problem(problems, path.name, f"skipped: {exc}")
                continue
            gate = None
            if (path / GATE_FILE).exists():
                try:
                    gate = GateDecision.model_validate_json((path / GATE_FILE).read_bytes())
                except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
                    first = str(exc).splitlines()[0]
                    self._problem(problems, path.name, f"{GATE_FILE} is unreadable ({first})")
            out.append(
                VersionInfo(
                    version=path.name,
                    live=path.name == live,
                    created_at=manifest.created_at,
                    metrics=manifest.metrics,
                    gate=gate,
                    retrieval=manifest.extras.get("retrieval"),
                    mutation_seq=seq_of_manifest(manifest.extras),
                )
            )
        return out

    def _problem(self, problems: list[tuple[str, str]] | None, version: str, reason: str) -> None:
        if problems is not None:
            problems.append((version, reason))
        if (version, reason) not in self._reported:  # once per distinct problem, not on every listing
            self._reported.add((version, reason))
            logger.warning("bundle %s: %s", version, reason)

    def load_current(self, *, verify: bool = True) -> Bundle:
        version = self.current_version()
        if version is None:
            raise NoLiveBundle(f"no live bundle in {self.root} (nothing published yet)")
        return load_bundle(self.version_path(version), verify=verify, index_opener=self.index_opener())

    def index_opener(self) -> IndexOpener | None:
        """How load_bundle opens an index kept outside the folder (the pointer's backend), or None."""
        return self.pointer.open_index if self.pointer is not None else None

    # -- writing ------------------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / LOCK_FILE, "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def activate(self, version: str) -> None:
        """Point CURRENT at an already published version (roll back or forward) after validating it
        (contract.bundles.bundle.validate: checksums and shapes; the model is not loaded)."""
        with self._locked():
            validate(self.version_path(version), index_opener=self.index_opener())
            try:
                previous = self.current_version()
            except BundleInvalid:  # activating is how an operator repairs an unreadable CURRENT
                previous = None
            self._set_current(version)
            self._log(
                {
                    "event": "activate",
                    "version": version,
                    "previous": previous,
                    "decided_at": datetime.now(UTC).isoformat(),
                }
            )
        logger.info("activated %s (was %s)", version, previous)

    def _set_current(self, version: str) -> None:
        write_text_atomic(self.root / CURRENT_FILE, version + "\n")
        fsync_dir(self.root)
        if self.pointer is not None:
            self.pointer.on_current(read_manifest(self.root / version))

    def _log(self, record: dict[str, Any]) -> None:
        path = self.root / GATE_LOG
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size >= self.gate_log_max_bytes:
                # one older generation is kept; readers (GET /bundles) page through the current file only
                os.replace(path, path.with_name(GATE_LOG + ".1"))
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
