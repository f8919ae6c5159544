"""The training run a bundle's model came from, typed: a run's config.json as the manifest carries it
(`Manifest.training_config`).

Written by the trainer (training/train/run_artifacts.py: `config` is the TrainConfig, beside where and on what
it ran); read back from every bundle ever published, so loading is lenient where the TrainConfig of this
version is strict:

- keys of `config` this version does not know (options of older versions) are kept in `unknown_config`,
  never refused; a `config` this version cannot validate at all is kept whole there, `config` None;
- a flat TrainConfig dict (an early layout: the options at the top level) becomes `config`;
- other top-level keys (newer or older records) are kept as they are (extra="allow");
- `{}`: a bundle of an untrained model (no run), `config` None.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator

from contract.config import TrainConfig

logger = logging.getLogger(__name__)


class TrainingRecord(BaseModel):
    """A training run's config.json: the typed TrainConfig and what the run recorded around it."""

    model_config = ConfigDict(extra="allow")

    config: TrainConfig | None = Field(None, description="every option of the run; None: no run")
    base_model: dict[str, Any] | None = Field(None, description="path, name and package of the base model")
    versions: dict[str, str | None] = Field(default_factory=dict, description="python and library versions")
    created_at: str | None = None
    data: dict[str, Any] = Field(default_factory=dict, description="data source, splits and their sizes")
    loss: dict[str, Any] = Field(default_factory=dict, description="the loss's own record (final τ, Λ range)")
    unknown_config: dict[str, Any] = Field(
        default_factory=dict,
        description="options under `config` this version does not know (older versions), kept unread",
    )

    @model_validator(mode="before")
    @classmethod
    def _older_layouts(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        known = set(TrainConfig.model_fields)
        if data and "config" not in data and set(data) <= known:
            data = {"config": data}  # the flat layout: the options themselves
        raw = data.get("config")
        if isinstance(raw, dict):
            unknown = {k: v for k, v in raw.items() if k not in known}
            try:
                data["config"] = TrainConfig.model_validate({k: v for k, v in raw.items() if k in known})
            except ValidationError as exc:
                logger.warning("training_config: config not valid for this version, kept unread (%s)", exc)
                data["config"], unknown = None, dict(raw)
            data["unknown_config"] = {**data.get("unknown_config", {}), **unknown}
        return data

    @model_serializer(mode="wrap")
    def _without_empty(self, handler: Any) -> dict[str, Any]:
        """Fields left at None or empty are not written: a manifest records what the run recorded."""
        return {k: v for k, v in handler(self).items() if v not in (None, {}, [])}
