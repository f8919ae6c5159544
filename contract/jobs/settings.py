"""The settings the job side shares with the API: `JobSettings`, env prefix `SEARCH_`.

The API's `app.settings.Settings` subclasses it, so the variables are declared (name, default, validation,
description) once; the worker and the `jobs` / `bundles` / `index` CLIs build it too, with their command-line
options as overrides, so a variable set for the API means the same to the worker. It lives in the contract
because `training` may not import `app`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from contract.bundles.collections import (
    DEFAULT_COLLECTION,
    Collections,
    collection_milvus_name,
    default_root,
)
from contract.jobs.defaults import DEFAULT_HEARTBEAT_TIMEOUT_S, default_queue_url

ENV_PREFIX = "SEARCH_"


class JobSettings(BaseSettings):
    """What both the API and the job worker / operator CLIs read (env prefix `SEARCH_`)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="ignore")

    bundles_dir: Path = Field(
        Path("bundles"),
        description="Folder of versioned bundles; its CURRENT file names the live version. "
        "Several API processes may share it (they read it, and append document writes to its "
        "mutations.sqlite).",
    )
    collections_root: Path | None = Field(
        None,
        description="Folder of the named collections: each `<root>/<name>/` is a bundles folder of its own "
        "(versions, CURRENT, gate and mutation logs, jobs), `<root>/aliases.json` maps aliases to them. The "
        "`default` collection is bundles_dir itself. Default: `<bundles_dir>/collections`.",
    )
    milvus_uri: str | None = Field(
        None,
        description="Milvus to search when index_backend is milvus: http://host:19530 (a cluster or a "
        "`python -m milvus_lite server`), or a milvus-lite path ending in .db (this process only).",
    )
    milvus_token: str | None = Field(
        None, description="Milvus credentials (`user:password` or an API key); unset = none."
    )
    milvus_name: str = Field(
        "infonce",
        description="Milvus names: collections `<name>_v<version>`, the live alias `<name>_live` (the "
        "cluster-side CURRENT pointer, flipped on activation). Must match the publisher's --milvus-name.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log lines as text, or json (one object a line: time, level, logger, message); the "
        "worker reads it too (its --log-format).",
    )
    queue_url: str | None = Field(
        None,
        description="Job queue: `sqlite:///path/jobs.db` or `redis://host:port/0`. "
        "Default: a SQLite file `jobs.db` beside the bundles folder (in its parent folder).",
    )
    data_root: Path = Field(
        Path("data"), description="Folder that job submissions may name datasets under (nothing outside it)."
    )
    models_root: Path = Field(
        Path("models"),
        description="Folder that a retrain's `base_model` option may name a model folder under (nothing "
        "outside it); the packaged `all-MiniLM-L6-v2` is always allowed by that name.",
    )
    job_heartbeat_timeout_s: float = Field(
        DEFAULT_HEARTBEAT_TIMEOUT_S,
        gt=0,
        description="A running job whose worker has not stamped its heartbeat for this long reads as failed "
        "(the worker died); keep it equal to the worker's --heartbeat-timeout.",
    )
    train_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where the worker runs retrain jobs' training steps (its --device default; a job's own "
        "`device` option wins): auto = cuda when torch sees a GPU (bf16/fp16 autocast), else cpu.",
    )

    @model_validator(mode="after")
    def _default_queue(self) -> Self:
        if self.queue_url is None:
            self.queue_url = default_queue_url(self.bundles_dir)  # beside the bundles the process uses
        if self.collections_root is None:
            self.collections_root = default_root(self.bundles_dir)
        return self

    def collections(self) -> Collections:
        """The collections these settings name: `default` = bundles_dir, the others under collections_root."""
        return Collections(self.collections_root, self.bundles_dir)

    def for_collection(self, name: str) -> Self:
        """These settings as collection `name` sees them: its bundles folder, its Milvus names."""
        if name == DEFAULT_COLLECTION:
            return self
        return self.model_copy(
            update={
                "bundles_dir": self.collections().folder(name),
                "milvus_name": collection_milvus_name(self.milvus_name, name),
            }
        )


def env_name(field: str) -> str:
    """The environment variable of one JobSettings field (`data_root` -> `SEARCH_DATA_ROOT`)."""
    return f"{ENV_PREFIX}{field.upper()}"


def field_default(field: str) -> Any:
    """The declared default of one JobSettings field, without reading the environment (for `--help`)."""
    return JobSettings.model_fields[field].default


def load_job_settings(**given: Any) -> JobSettings:
    """JobSettings from the environment, with the command-line values that were given (not None) on top.

    Raises ValueError naming the variable and the problem, one line, for a CLI to print."""
    try:
        return JobSettings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "?"
        raise ValueError(f"{env_name(field)} / option for {field}: {first['msg']}") from None
