"""What a job may read: files under the data root, models under the models root, nothing else.

A job names a dataset (a folder or file under the data root), qrels splits and optionally a base model.
Every file the job will open is resolved with `os.path.realpath` (symlinks followed, also those *inside*
an accepted dataset folder) and refused when it lands outside its root or has more than one hard link;
a base model's folder is checked file by file the same way. The API and the CLI check here at
submission, so a bad request is a 400 before anything is queued. What the worker opens is confined again
at open time by contract/jobs/confined_reader.py (a link or hard link planted after submission is
refused there, with no window between check and open). Refusals name the field or the file relative to
its root, never the target of a link.

Split names are plain names (`SPLIT_PATTERN`), never paths: they are joined into `qrels/<split>.tsv`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from contract.config import SPLIT_PATTERN
from contract.errors import DatasetNotFound, DatasetRefused, ModelRefused

SPLIT_RE = re.compile(SPLIT_PATTERN)
# the packaged encoder (contract.encoding.encoder.DEFAULT_MODEL_NAME) is always allowed as a base model
PACKAGED_MODEL = "all-MiniLM-L6-v2"
SPLIT_OPTIONS = ("train_split", "eval_split")
# files of a BEIR folder a job reads besides qrels/<split>.tsv (training.data.split)
BEIR_FILES = ("corpus.jsonl", "queries.jsonl")
# every character str.isspace() is true for (a name may not start or end with one: _plain_name)
SPACES = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_CLASS = "".join(f"\\u{ord(c):04x}" for c in SPACES)
# _plain_name's shape as a pattern, for the API's schema, so a request the spec calls valid is never refused
# for its name's shape: no leading or trailing space, no NUL. Where a name leads (absolute, `..`, a link out)
# is the confinement's to refuse, with 400 `dataset_refused`, after resolving it.
NAME_PATTERN = rf"^[^{_CLASS}\x00](?:[^\x00]*[^{_CLASS}\x00])?$"


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _plain_name(name: str) -> bool:
    return bool(name) and name.strip() == name and "\x00" not in name and not Path(name).is_absolute()


def resolve_dataset(data_root: str | Path, name: str) -> Path:
    """The dataset folder (or file) `name` under `data_root`, refusing anything that escapes it.

    Resolving follows symlinks, so `..`, absolute names and links pointing outside the root all fail.
    """
    root = os.path.realpath(data_root)
    if not _plain_name(name):
        raise DatasetRefused(f"dataset {name!r} must be a name under the data root")
    path = os.path.realpath(os.path.join(root, name))
    if path == root or not _inside(root, path):
        raise DatasetRefused(f"dataset {name!r} resolves outside the data root")
    if not os.path.exists(path):
        raise DatasetNotFound(f"no dataset named {name!r} under the data root")
    return Path(path)


MAX_LISTED_DATASETS = 500  # the page's list of datasets stops here (a data root is a shelf, not an archive)


def list_datasets(data_root: str | Path) -> list[str]:
    """The names a job may be given under `data_root`: its entries (not hidden) that `resolve_dataset`
    accepts, a BEIR folder (with corpus.jsonl) or a pairs file; sorted, at most MAX_LISTED_DATASETS. A link
    out of the root is left out, as a job would refuse it; a missing root lists nothing."""
    try:
        entries = sorted(e.name for e in os.scandir(data_root) if not e.name.startswith("."))
    except OSError:
        return []
    names = []
    for name in entries:
        try:
            path = resolve_dataset(data_root, name)
        except (DatasetRefused, DatasetNotFound):
            continue
        if path.is_file() or (path / BEIR_FILES[0]).is_file():
            names.append(name)
        if len(names) == MAX_LISTED_DATASETS:
            break
    return names


def check_split(field: str, split: Any) -> None:
    if isinstance(split, str) and not SPLIT_RE.match(split):
        raise DatasetRefused(f"options.{field}: {split!r} is not a split name (letters, digits, _ and -)")


def dataset_files(data_dir: str | Path, splits: list[str]) -> list[Path]:
    """The files a job reads from a dataset: the pairs file itself, or a BEIR folder's files."""
    folder = Path(data_dir)
    if not folder.is_dir():
        return [folder]
    return [folder / f for f in BEIR_FILES] + [folder / "qrels" / f"{s}.tsv" for s in splits]


def confine_dataset(data_root: str | Path, data_dir: str | Path, splits: list[str]) -> None:
    """Refuse (DatasetRefused) when any file the job would read resolves outside the data root.

    Missing files are left to the readers (they name the file); a dangling link is judged by its target.
    """
    root = os.path.realpath(data_root)
    for split in splits:
        check_split("split", split)
    for path in dataset_files(data_dir, splits):
        if not os.path.lexists(path):
            continue
        _check_file(root, str(path), "dataset file", "data root", DatasetRefused)


def _check_file(
    root: str, path: str, kind: str, root_name: str, refused: type[DatasetRefused] | type[ModelRefused]
) -> None:
    """One file: resolves inside `root` and is not a hard link (its target's link count, when a link)."""
    shown = os.path.relpath(os.path.abspath(path), root)
    real = os.path.realpath(path)
    if not _inside(root, real):
        raise refused(f"{kind} {shown} resolves outside the {root_name}")
    try:
        links = os.stat(real).st_nlink
    except OSError:
        return  # dangling or unreadable: the reader names it when the job opens it
    if os.path.isfile(real) and links > 1:
        raise refused(f"{kind} {shown} has {links} hard links (copy it instead of linking)")


def resolve_model(models_root: str | Path | None, name: str | None) -> Path | None:
    """The base model folder for `name`: None for the packaged model, else a folder under the models root."""
    if name is None or name == PACKAGED_MODEL:
        return None
    if models_root is None:
        raise ModelRefused(f"options.base_model: {name!r} refused: no models root is configured")
    root = os.path.realpath(models_root)
    if not _plain_name(name):
        raise ModelRefused(f"options.base_model: {name!r} must be a model name under the models root")
    path = os.path.realpath(os.path.join(root, name))
    if path == root or not _inside(root, path):
        raise ModelRefused(f"options.base_model: {name!r} resolves outside the models root")
    if not os.path.isdir(path):
        raise DatasetNotFound(f"options.base_model: no model named {name!r} under the models root")
    seen = {path}
    for folder, dirs, files in os.walk(path, followlinks=True):
        for entry in list(dirs):
            real = os.path.realpath(os.path.join(folder, entry))
            if not _inside(root, real):
                shown = os.path.relpath(os.path.join(folder, entry), root)
                raise ModelRefused(
                    f"options.base_model: model folder {shown} resolves outside the models root"
                )
            if real in seen:  # a link back up the tree: walked once
                dirs.remove(entry)
            seen.add(real)
        for entry in files:
            _check_file(
                root,
                os.path.join(folder, entry),
                "options.base_model: model file",
                "models root",
                ModelRefused,
            )
    return Path(path)


def confine_options(
    options: dict[str, Any], *, models_root: str | Path | None
) -> tuple[list[str], Path | None]:
    """Check the path-like options of a submission before they are validated as a whole.

    Returns the splits the job will read and the resolved base model (None = packaged).
    """
    for field in SPLIT_OPTIONS:
        check_split(field, options.get(field))
    splits = [str(options.get("train_split", "train")), str(options.get("eval_split", "test"))]
    base = options.get("base_model")
    model = resolve_model(models_root, base) if isinstance(base, str) else None
    return splits, model
