"""The publishing options of `index` and `pipeline`, declared once: the index and its recall, the gate,
the versions kept, the ONNX and distilled query encoders, where the vectors go (FAISS in the bundle, or
Milvus). Both commands get them generated from PublishOptions (training/cli/config_options.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from contract.defaults import KEEP_VERSIONS, TARGET_RECALL
from contract.index.backend import BackendConfig, IndexBackend, IndexKind
from contract.jobs.plan import DEFAULT_VARIANTS, DataPlan, IndexPlan, PublicationPlan, PublishPlan
from training.cli.settings_options import collection_backend, job_settings, setting_extra
from training.distill.config import Variant


class PublishOptions(BaseModel):
    """How a trained model becomes a bundle version; the Milvus ones default to the API's settings
    (SEARCH_MILVUS_*), so publisher and server agree unless an option says otherwise."""

    model_config = ConfigDict(extra="forbid")

    index: IndexKind = Field("auto", description="FAISS index kind (auto picks by size and memory).")
    target_recall: float = Field(
        TARGET_RECALL, gt=0.0, le=1.0, description="ANN recall@10 vs exact search to tune to."
    )
    force: bool = Field(False, description="Make the bundle live even if the quality gate rejects it.")
    keep: int = Field(KEEP_VERSIONS, ge=1, description="Versions kept (the live one always is).")
    onnx: bool = Field(True, description="Export + score the ONNX query encoders into the bundle.")
    # on by default: a new user's demo serves the static tower (~0.06 ms a query) instead of ONNX int8
    # (~1.5 ms), at the cost printed in the phase table ("distill query encoders")
    distill: bool | None = Field(
        None,
        description="Train the distilled query encoders (distill_variants) with default settings; `python -m "
        "training distill` has every knob. Unset: on where it can run (a train split, a FAISS index).",
        json_schema_extra={"shown_default": "on"},
    )
    distill_variants: list[Variant] = Field(
        list(DEFAULT_VARIANTS),
        description="Comma-separated: static (token table served in numpy), distilled (2-layer transformer, "
        "~20 min on 2 CPU cores for scifact).",
    )
    index_backend: IndexBackend = Field(
        "faiss",
        description="faiss (in the bundle) or milvus.",
        json_schema_extra={"envvar": "SEARCH_INDEX_BACKEND"},
    )
    milvus_uri: str | None = Field(
        None,
        description="http://host:19530 or a milvus-lite .db path.",
        json_schema_extra=setting_extra("milvus_uri"),
    )
    milvus_token: str | None = Field(
        None, description="Milvus credentials.", json_schema_extra=setting_extra("milvus_token")
    )
    milvus_name: str | None = Field(
        None,
        description="Collections <name>_v<version>, alias <name>_live.",
        json_schema_extra=setting_extra("milvus_name"),
    )

    def plan(
        self,
        data_dir: str | Path,
        bundles_dir: str | Path,
        *,
        eval_split: str = "test",
        collection: str | None = None,
    ) -> PublishPlan:
        """These options as the publish part of a plan (contract/jobs/plan.py); a BackendConfig that is
        inconsistent (milvus without a URI) raises ConfigError. `collection`: the Milvus names are its own
        (`<name>_<collection>`), as jobs name them."""
        backend = backend_config(self.index_backend, self.milvus_uri, self.milvus_token, self.milvus_name)
        return PublishPlan(
            data=DataPlan(data_dir=str(data_dir), eval_split=eval_split),
            index=IndexPlan(
                kind=self.index,
                target_recall=self.target_recall,
                backend=collection_backend(backend, collection),
            ),
            publication=PublicationPlan(
                bundles_dir=str(bundles_dir),
                force=self.force,
                keep=self.keep,
                onnx=self.onnx,
                distill=self.distill,  # unset: where it can run
                distill_variants=self.distill_variants,
            ),
        )


def backend_config(
    backend: IndexBackend, uri: str | None, token: str | None, name: str | None
) -> BackendConfig:
    """The index backend options as a contract.index.backend.BackendConfig (ConfigError when inconsistent);
    the Milvus ones not given come from the API's settings (SEARCH_MILVUS_*)."""
    s = job_settings(milvus_uri=uri, milvus_token=token, milvus_name=name)
    return BackendConfig(
        backend=backend, milvus_uri=s.milvus_uri, milvus_token=s.milvus_token, milvus_name=s.milvus_name
    )
