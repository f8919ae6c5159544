"""What a model's training run (or a re-indexed bundle) says about it, carried into the new bundle's
manifest by training.publish.index_model.index_model: its training config, training metrics and gap report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.bundles.bundle import MANIFEST_FILE, read_manifest
from contract.errors import ConfigError
from training.bundle.store import FINGERPRINT_KEY, evaluation_fingerprint

if TYPE_CHECKING:
    from training.data.retrieval_data import RetrievalData

RUN_CONFIG = "config.json"
RUN_METRICS = "metrics.json"
RUN_REPORT = "report"


def resolve_run(model_dir: str | Path) -> tuple[Path, Path | None]:
    """(model folder, run or bundle folder or None): accepts `<run>`, `<run>/model`, `<bundle>/model`
    or a bare sentence-transformers folder."""
    path = Path(model_dir)
    if (path / "model").is_dir():
        return path / "model", path
    if any((path.parent / name).is_file() for name in (RUN_CONFIG, RUN_METRICS, MANIFEST_FILE)):
        return path, path.parent  # a run's model/ or a published bundle's model/
    return path, None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def base_model_name(training_config: dict[str, Any]) -> str:
    """The base model's name: a run's config.json records {path, name, package}; older ones a string."""
    base = training_config.get("base_model") or "all-MiniLM-L6-v2"
    if isinstance(base, dict):
        return str(base.get("name") or base.get("path") or "all-MiniLM-L6-v2")
    return str(base)


@dataclass
class RunStory:
    """What the model's run (or re-indexed bundle) folder says about it, carried into the manifest."""

    training_config: dict[str, Any]
    extras: dict[str, Any]
    report_dir: Path | None


def run_story(run_dir: Path | None, data_dir: str | Path, split: str, data: RetrievalData) -> RunStory:
    story = RunStory(
        {}, {"data": str(data_dir), "split": split, FINGERPRINT_KEY: evaluation_fingerprint(data)}, None
    )
    if run_dir is None:
        return story
    if (run_dir / RUN_CONFIG).is_file():
        story.training_config = _read_json(run_dir / RUN_CONFIG)
    if (run_dir / RUN_METRICS).is_file():
        story.extras["training_metrics"] = _read_json(run_dir / RUN_METRICS)
    if (run_dir / RUN_REPORT / "report.json").is_file():
        story.report_dir = run_dir / RUN_REPORT
    if (run_dir / MANIFEST_FILE).is_file():  # re-indexing with a published bundle's model: keep its story
        previous = read_manifest(run_dir)
        story.training_config = previous.training_config.model_dump(mode="json")
        kept = {k: v for k, v in previous.extras.items() if k == "training_metrics"}
        story.extras = {**kept, **story.extras, "reindexed_from": previous.version}
    return story
