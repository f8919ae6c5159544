"""Line readers for dataset files: every error names the file, the 1-based line and the field.

Shared by the BEIR reader (training/data/beir.py) and the pairs-file reader (training/data/pairs_file.py).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contract.errors import DataError
from contract.jobs.confined_reader import open_input


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line) for each line; bytes are decoded per line to name the bad one.

    Opened through `open_input`: in a job, confined to the data root at open time
    (contract/jobs/confined_reader.py) and read from that one descriptor."""
    if not path.is_file():
        raise DataError(path, "file not found" if not path.exists() else "is not a regular file")
    with open_input(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                # utf-8-sig on the first line accepts the BOM some editors write
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(path, f"invalid UTF-8 (byte {exc.start} of the line)", line=lineno) from None
            yield lineno, line


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in numbered_lines(path):
        if not line.strip():
            continue
        # without its line break: parsed with it, an unfinished object is reported at "line 2, column 1"
        text = line.rstrip("\r\n")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            # pos counts characters of this one line: the column an editor shows (1-based)
            where = f"column {exc.pos + 1}" + (", the end of the line" if exc.pos >= len(text) else "")
            raise DataError(path, f"invalid JSON: {exc.msg} ({where})", line=lineno) from None
        except RecursionError:
            raise DataError(path, "invalid JSON: nested too deeply", line=lineno) from None
        if not isinstance(obj, dict):
            raise DataError(path, f"expected a JSON object, got {json_type(obj)}", line=lineno)
        yield lineno, obj


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def record_id(obj: dict[str, Any], path: Path, lineno: int) -> str:
    key = "_id" if "_id" in obj else "id"
    if key not in obj:
        raise DataError(path, "missing id (expected an '_id' or 'id' key)", line=lineno, field="_id")
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(
            path, f"must be a string, got {json_type(value)} (quote numeric ids)", line=lineno, field=key
        )
    if not value.strip():
        raise DataError(path, "is empty", line=lineno, field=key)
    return value


def string_field(obj: dict[str, Any], key: str, path: Path, lineno: int, *, required: bool) -> str:
    value = obj.get(key)
    if value is None:
        if required:
            raise DataError(path, "is missing", line=lineno, field=key)
        return ""
    if not isinstance(value, str):
        raise DataError(path, f"must be a string, got {json_type(value)}", line=lineno, field=key)
    return value


def check_fields(
    obj: dict[str, Any], known: tuple[str, ...], path: Path, lineno: int, *, what: str, elsewhere: str = ""
) -> None:
    """Refuse a key the reader does not know, naming it and the line: a typo (`"txt"`) would otherwise
    leave the field it meant silently empty. `elsewhere` says where other values may go, if anywhere."""
    for key in obj:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            allowed = ", ".join(f"'{k}'" for k in known)
            raise DataError(
                path, f"is not a field of {what}{hint}; it has {allowed}{elsewhere}", line=lineno, field=key
            )


def check_unique(seen: dict[str, int], item_id: str, path: Path, lineno: int, field: str) -> None:
    if item_id in seen:
        raise DataError(
            path, f"duplicate id {item_id!r} (lines {seen[item_id]} and {lineno})", line=lineno, field=field
        )
    seen[item_id] = lineno
