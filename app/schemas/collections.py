"""Bodies of the /collections and /aliases routes, and the per-collection part of /readyz."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.search import ReadyResponse
from contract.jobs.confine import NAME_PATTERN

NAME_DESCRIPTION = (
    "1-63 lower-case ASCII letters, digits, '_' and '-', starting with a letter or digit "
    "(`^[a-z0-9][a-z0-9_-]{0,62}$`); collections and aliases share one namespace."
)


class CollectionCreate(BaseModel):
    """A new, empty collection; with `dataset`, a retrain job that publishes its first bundle."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256, description=NAME_DESCRIPTION, examples=["docs"])
    dataset: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        pattern=NAME_PATTERN,
        description="A dataset name under the data root: a retrain job is queued for the new collection "
        "(fine-tune → gap report → index → publish). Without it the collection stays empty until something "
        "publishes into it (`python -m training pipeline --collection NAME …`, a job).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The retrain job's options (as for POST /jobs type=retrain); only with `dataset`.",
    )


class CollectionInfo(BaseModel):
    """One collection, as seen without loading it (the live fields only when it is loaded here)."""

    name: str
    default: bool = Field(description="The collection of the routes without /collections/{name}/.")
    aliases: list[str] = Field(description="Aliases that name it.")
    loaded: bool = Field(description="Loaded in this API process now (a request loads it when it is not).")
    current: str | None = Field(description="The version its CURRENT names (null: nothing published).")
    created_at: str | None = None
    dataset: str | None = Field(None, description="The dataset it was created from, when it was.")
    live: str | None = Field(None, description="The version this process serves (when loaded).")
    n_vectors: int | None = None
    encoder_backend: str | None = None
    load_seconds: float | None = Field(None, description="How long its last load took here.")
    resident_bytes: int | None = Field(
        None,
        description="Index, BM25 and encoder files it holds in memory (a shared encoder counted in full).",
    )
    in_flight: int | None = None
    not_live_reason: str | None = None


class CollectionList(BaseModel):
    collections: list[CollectionInfo]
    aliases: dict[str, str] = Field(description="{alias: collection}.")
    loaded: int = Field(description="Collections loaded in this process (default included).")
    max_loaded_collections: int = Field(description="SEARCH_MAX_LOADED_COLLECTIONS (besides default).")
    max_loaded_bytes: int | None = Field(description="SEARCH_MAX_LOADED_BYTES (null: no byte budget).")
    resident_bytes: int = Field(description="What the loaded collections hold, each shared encoder once.")


class CollectionCreated(CollectionInfo):
    job_id: str | None = Field(None, description="The retrain job queued for it (with `dataset`).")


class CollectionDeleted(BaseModel):
    deleted: str
    versions: list[str] = Field(description="The bundle versions removed with it.")


class AliasBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    collection: str = Field(
        max_length=256, description="The collection the alias names (never another alias).", examples=["docs"]
    )


class AliasInfo(BaseModel):
    alias: str
    collection: str
    previous: str | None = Field(None, description="What the alias named before this change (PUT).")


class AliasList(BaseModel):
    aliases: dict[str, str] = Field(description="{alias: collection}.")


class CollectionReadiness(BaseModel):
    status: Literal["ready", "not_ready", "unloaded", "empty"] = Field(
        description="ready / not_ready: loaded here, its live bundle checked; unloaded: CURRENT names a "
        "version that loads on first use; empty: nothing published."
    )
    version: str | None = None
    reason: str | None = None


class ReadyWithCollections(ReadyResponse):
    collections: dict[str, CollectionReadiness] = Field(
        default_factory=dict,
        description="Every collection, checked without loading any (default's canary is the check above).",
    )
