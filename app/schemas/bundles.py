"""Bodies of the /bundles routes: the listing (versions, gate decisions, failed loads) and activation."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class BundleEntry(BaseModel):
    version: str
    live: bool = Field(description="Served by this process now.")
    current: bool = Field(description="Named by CURRENT on disk (the process follows it within a poll).")
    created_at: str
    metrics: dict[str, dict[str, float]] = Field(description="Evaluation metrics recorded in the manifest.")
    gate: dict[str, Any] | None = Field(
        None, description="The quality-gate decision made when it was published."
    )
    retrieval: dict[str, Any] | None = Field(
        None,
        description="Its default search mode (`default_mode`), hybrid fusion (`fusion`: rrf with k or convex "
        "with alpha, candidates per retriever) and every candidate's nDCG@10 on the validation queries "
        "carved from the training split. Absent: a bundle without a lexical index, dense only.",
    )
    mutation_seq: int = Field(0, description="Last mutation-log seq folded into this version's corpus.")


class LoadFailure(BaseModel):
    version: str
    error: str
    at: str = Field(description="UTC time of the failed load.")


class Unreadable(BaseModel):
    version: str
    error: str = Field(description="Why the version (or its gate decision) could not be read.")


class BundlesResponse(BaseModel):
    live: str | None
    current: str | None
    encoder_backend: str | None = Field(
        description="Query encoder of the live bundle (torch, onnx, onnx-int8, distilled, static, "
        "static-routed, distilled-routed)."
    )
    encoder_choice: dict[str, Any] | None = Field(
        None,
        description="With SEARCH_ENCODER_BACKEND=auto: each candidate's recorded nDCG@10 loss, whether it "
        "was eligible, its ms per query as timed at load (fastest of interleaved passes, median, rounds won), "
        "the one chosen and `certainty` (rounds it won, the runner-up's time ratio, the tie band and the rule "
        "that decided: within the band the smaller nDCG@10 loss wins); with a routed encoder (auto's "
        "or named) `routing`: its margin, recorded share and loss, fallback and the queries routed since load.",
    )
    serving: dict[str, Any] | None = Field(
        None,
        description="How this API's processes were chosen (python -m app.serve, app/engine/serving_plan.py): "
        "`workers`, `encoder_threads`, `cores`, the `expected_encoder` read from the live bundle at start, "
        "and the `reason`; each worker holds its own in-memory copy of the FAISS index. `spare_cores`: the "
        "live query encoder's second session, run while other processes leave its cores idle "
        "(SEARCH_ENCODER_SPARE_CORES): its `threads` (0: none), and this worker's encoder `calls` since load "
        "and the `wide_calls` among them; `half_scan`: the live FAISS index's fp16 copy for few-query scans "
        "(SEARCH_INDEX_HALF_SCAN; null: none): its `bytes`, and this worker's `searches` through it since load "
        "and the `fallbacks` among them, searched again in fp32; `pid`: the worker process that answered.",
    )
    versions: list[BundleEntry]
    gate_decisions: list[dict[str, Any]] = Field(
        description="Gate decisions and activations from gate.jsonl, newest first, one page "
        "(`gate_limit`, `gate_offset`). A decision says `accepted`; which version is live is `current`."
    )
    gate_total: int = Field(0, description="Entries in gate.jsonl (it is rotated beyond 1 MiB).")
    last_failed_load: LoadFailure | None = Field(
        description="The latest failed load (a version, or `CURRENT` when the pointer is unreadable); "
        "cleared once the version CURRENT names serves again."
    )
    fallback_from: str | None = Field(
        None,
        description="Set when this process started while CURRENT's version would not load and serves the "
        "newest version that does instead: the version CURRENT names.",
    )
    unreadable: list[Unreadable] = Field(
        default_factory=list, description="Versions left out or listed without a gate decision, and why."
    )
    mutations: dict[str, Any] | None = Field(
        None,
        description="The document mutation log: its head `log_seq`; this process's live state (`bundle_seq` "
        "folded into the bundle, `applied_seq`, `delta_docs`, `tombstones`, `compaction_suggested`); and "
        "`replicas`, each API process's last recorded state.",
    )


class ActivateResponse(BaseModel):
    version: str
    previous: str | None
    encoder_backend: str
