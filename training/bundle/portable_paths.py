"""Keep the building machine's absolute paths out of what a bundle publishes.

A bundle is copied between machines (a volume, a registry, `cp -r`); an absolute folder of the machine
that built it means nothing elsewhere and leaks its layout. What a bundle records about where things
came from (the dataset, the base model, the run's model folder) keeps the folder's *name*: enough to
tell runs apart, the same on every machine. Bundle-internal files are named relative to the bundle.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from contract.atomic import write_json_atomic

_WINDOWS_ABSOLUTE = re.compile(r"^[A-Za-z]:[\\/]")


def is_absolute_path(text: str) -> bool:
    """An absolute POSIX path with at least two parts (`/a/b`) or a Windows drive path; one line."""
    if "\n" in text or len(text) > 4096:
        return False
    if _WINDOWS_ABSOLUTE.match(text):
        return True
    return text.startswith("/") and len(PurePosixPath(text).parts) >= 3


def path_name(text: str) -> str:
    """The last part of a path (`/data/sets/scifact/` -> `scifact`)."""
    if _WINDOWS_ABSOLUTE.match(text):
        return PureWindowsPath(text).name
    return PurePosixPath(text).name


def portable(value: Any) -> Any:
    """A copy of a JSON-like value with every absolute path string replaced by its last part."""
    if isinstance(value, str):
        return path_name(value) if is_absolute_path(value) else value
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v) for v in value]
    return value


def relocate_report(report_file: Path, model_path: str = "model") -> None:
    """Rewrite a bundle's report.json so `model.path` names the bundle's model folder (relative), not the
    training run's absolute one. Atomic (temp + os.replace); no-op when the file is absent."""
    if not report_file.is_file():
        return
    data = json.loads(report_file.read_text(encoding="utf-8"))
    if isinstance(data.get("model"), dict) and "path" in data["model"]:
        data["model"]["path"] = model_path
    write_json_atomic(report_file, portable(data))
