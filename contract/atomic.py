"""The one way files are written: to a temp file beside the target, fsynced, then `os.replace`d over it.

Readers (the API, a second worker, a crash-restarted process) see the old file or the new one, never a
half-written one; a writer that fails removes its temp file. The temp name is unique per call, so two
writers of one path (two jobs filling the embedding cache) cannot clobber each other's temp file, and it
is created with the process umask like any other file.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temp path beside `path` for any writer (faiss, sqlite, savefig, torch.onnx.export);
    once the block returns, fsync it and replace `path` with it. On an exception, remove it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    with atomic_path(path) as tmp, open(tmp, "xb") as f:
        f.write(data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, data: Any, *, indent: int | None = 2, newline: bool = False) -> Path:
    """JSON (UTF-8, non-ASCII kept, unknown types through str) written atomically."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, default=str)
    return write_text_atomic(path, text + "\n" if newline else text)


def fsync_file(path: str | Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str | Path) -> None:
    """Make a rename or a new entry in `path` durable (POSIX: the folder itself needs an fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file and folder under `root` (a staged bundle before its rename into place)."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fsync_file(Path(dirpath) / name)
        fsync_dir(dirpath)
