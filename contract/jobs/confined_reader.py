"""The one reader of everything a job opens: confined to its roots at open time, read from that descriptor.

A job's inputs are the dataset's files under the data root (corpus.jsonl, queries.jsonl, every
qrels/<split>.tsv it reads, or the pairs file) and, for a retrain from a named base model, every file of
that model's folder under the models root. `ConfinedReader.open` is how each of them is opened:

1. the path is resolved (`realpath`, so a link *inside* the root that stays inside is allowed) and must
   land under its root, else `DatasetRefused` / `ModelRefused` naming the file relative to the root;
2. the resolved path is opened one component at a time from a descriptor of the root, each component
   with `O_NOFOLLOW` (directories also `O_DIRECTORY`): a component swapped for a link between step 1
   and here fails the open instead of being followed, so there is no check-then-open window;
3. the opened descriptor is `fstat`ed: it must be a regular file (a FIFO is opened non-blocking and
   refused, never waited on) with exactly one hard link. A hard link cannot be told from the original
   and resolving a path cannot see it, so a file in the root that is also a file elsewhere (planted with
   `ln`) is refused. The packaged base model is not read through here (it is installed software, not
   job input), so no rule is needed for its files;
4. the caller reads from that descriptor only (`open` returns a binary file object over it).

A job's task body activates a reader for the data and models roots (`confined_reads`); the dataset
readers (training/data/line_reader.py) open through `open_input`, which uses the active reader, or
plain `open` for the command line, whose user may read what they like. Each confined open is also
raised as the audit event `infonce_search.confined_open` (root name, path relative to it), so a test
can prove, with `sys.addaudithook`, that every file a job opened under a root came through here.

A base model folder is copied file by file through the reader into a private folder (`copy_tree`),
and the job loads that copy: sentence-transformers opens files by path, which cannot be confined.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import BinaryIO

from contract.errors import DatasetRefused, ModelRefused

AUDIT_EVENT = "infonce_search.confined_open"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20


class _Root:
    def __init__(self, name: str, path: str | Path, refused: type[DatasetRefused] | type[ModelRefused]):
        self.name = name  # "data root" / "models root": what refusals say
        self.real = os.path.realpath(path)
        self.refused = refused

    def holds(self, path: str) -> bool:
        return path == self.real or path.startswith(self.real.rstrip(os.sep) + os.sep)

    def shown(self, path: str | Path) -> str:
        """`path` relative to this root, for messages (never an absolute path, never a link's target)."""
        return os.path.relpath(os.path.abspath(path), self.real)


class ConfinedReader:
    """Opens files under the data root and the models root only (see the module docstring)."""

    def __init__(self, *, data_root: str | Path | None, models_root: str | Path | None = None):
        self.roots = [
            _Root(name, path, refused)
            for name, path, refused in (
                ("data root", data_root, DatasetRefused),
                ("models root", models_root, ModelRefused),
            )
            if path is not None
        ]

    def _root_of(self, path: str | Path) -> _Root:
        """The root `path` is named under (lexically, before any link is followed)."""
        absolute = os.path.abspath(path)
        for root in sorted(self.roots, key=lambda r: len(r.real), reverse=True):  # nested roots: innermost
            if root.holds(absolute):
                return root
        # a path outside every root was never handed out by the job's own resolution: say so plainly
        raise DatasetRefused(f"{Path(path).name}: not under the data root or the models root")

    def open(self, path: str | Path) -> BinaryIO:
        """The file at `path`, opened confined to its root (module docstring, steps 1-3), for reading."""
        root = self._root_of(path)
        shown = root.shown(path)
        real = os.path.realpath(path)
        if not root.holds(real) or real == root.real:
            kind = "dataset file" if root.refused is DatasetRefused else "model file"
            raise root.refused(f"{kind} {shown} resolves outside the {root.name}")
        fd = self._open_below(root, os.path.relpath(real, root.real), shown)
        try:
            self._check_descriptor(root, fd, shown)
            sys.audit(AUDIT_EVENT, root.name, shown)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def _open_below(self, root: _Root, relative: str, shown: str) -> int:
        parts = Path(relative).parts
        if not parts or any(p in (".", "..") for p in parts):  # realpath never yields these; be sure
            raise root.refused(f"{shown}: not a plain path under the {root.name}")
        fd = os.open(root.real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                try:
                    child = os.open(part, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise root.refused(
                            f"{shown} changed into a link while it was being opened under the {root.name}"
                        ) from None
                    raise
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _check_descriptor(root: _Root, fd: int, shown: str) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise root.refused(f"{shown} is not a regular file")
        if st.st_nlink > 1:
            raise root.refused(
                f"{shown} has {st.st_nlink} hard links: a file under the {root.name} must not also be a "
                "file elsewhere (copy it instead of linking)"
            )
        os.set_blocking(fd, True)

    def copy_tree(self, source: str | Path, dest: str | Path) -> Path:
        """Copy every file of the folder `source` (under a root) into `dest` through `open`.

        Sub-folders that are links are followed only when they resolve inside the root (each file in them
        is still opened confined); anything else that is not a folder or a regular file is refused.
        """
        root = self._root_of(source)
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        os.chmod(dest, 0o700)  # the job's private copy: nobody else may swap files in it
        seen = {os.path.realpath(source)}
        for folder, dirs, files in os.walk(source, followlinks=True):
            for name in list(dirs):
                real = os.path.realpath(os.path.join(folder, name))
                if not root.holds(real):
                    shown = root.shown(os.path.join(folder, name))
                    raise root.refused(f"model folder {shown} resolves outside the {root.name}")
                if real in seen:  # a link back up the tree: walked once
                    dirs.remove(name)
                seen.add(real)
            target = dest / os.path.relpath(folder, source)
            target.mkdir(parents=True, exist_ok=True)
            for name in files:
                with self.open(os.path.join(folder, name)) as src, open(target / name, "xb") as out:
                    for block in iter(lambda src=src: src.read(_COPY_CHUNK), b""):  # type: ignore[misc]
                        out.write(block)
        return dest


_ACTIVE: ContextVar[ConfinedReader | None] = ContextVar("confined_reader", default=None)


@contextlib.contextmanager
def confined_reads(reader: ConfinedReader) -> Iterator[ConfinedReader]:
    """Make `reader` the one every `open_input` in this context (a job's task body) goes through."""
    token = _ACTIVE.set(reader)
    try:
        yield reader
    finally:
        _ACTIVE.reset(token)


def active_reader() -> ConfinedReader | None:
    return _ACTIVE.get()


def open_input(path: str | Path) -> BinaryIO:
    """Open a job input file for reading: confined by the active reader in a job, plain on the CLI."""
    reader = _ACTIVE.get()
    if reader is None:
        return open(path, "rb")
    return reader.open(path)
