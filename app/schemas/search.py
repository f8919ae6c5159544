"""Request and response bodies of the API (pydantic). Their descriptions become the OpenAPI text."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from fastapi.openapi.models import Example
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from app.schemas.text import Text, valid_unicode
from contract.bundles.report_schema import GapReport
from contract.defaults import MAX_DEPTH, MAX_QUERY_CHARS

SCORE_DOC = (
    "The model's learned similarity between query and document: cosine similarity for an InfoNCE "
    "model (metric 'cosine', in [-1, 1]); for an AnInfoNCE model (metric 'aninfonce') "
    "-1/2 * sum_c lambda_c (u_c - v_c)^2 = -1/2 ||sqrt(Lambda) (u - v)||^2 (<= 0; 0 = identical). "
    "Higher is more similar in both cases."
)
# Schema-level caps that keep every filter inside SQLite's limits (expression depth 1000, 32766 bound
# parameters): at most MAX_FILTER_FIELDS fields (6 operators each) and MAX_FILTER_VALUES values in all.
# Settings.max_filter_fields lowers the field cap per server.
MAX_FILTER_FIELDS = 128
MAX_FILTER_VALUES = 10_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # SQLite integers are 64-bit


def _scalar(value: Any) -> Any:
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("integers must fit in 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


def _not_bool(value: Any) -> Any:
    # JSON true/false are not numbers: pydantic's lax float would take them as 1.0 / 0.0
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


Finite = Annotated[float, BeforeValidator(_not_bool), Field(allow_inf_nan=False)]


def _json_integer(value: Any) -> Any:
    # JSON Schema's "integer" is any number with a zero fraction (889.0 too) but never a string or a
    # boolean; pydantic's strict int refuses 889.0 and its lax int takes "889" and true
    if isinstance(value, (bool, str)):
        raise ValueError("must be a JSON number without a fraction, not a string or a boolean")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]
Scalar = Annotated[Text | Int64 | Finite | bool, BeforeValidator(_scalar)]
QueryText = Annotated[Text, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
FilterField = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*$",
        description="A metadata field; dots reach into nested objects.",
    ),
]


class Condition(BaseModel):
    """Conditions on one metadata field; all given ones must hold."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    eq: Scalar | None = Field(None, description="Equal to this value.")
    in_: list[Scalar] | None = Field(
        None, alias="in", min_length=1, max_length=1000, description="Any of these."
    )
    gt: Finite | None = None
    gte: Finite | None = None
    lt: Finite | None = None
    lte: Finite | None = None

    @model_validator(mode="after")
    def _some_condition(self) -> Condition:
        if all(v is None for v in (self.eq, self.in_, self.gt, self.gte, self.lt, self.lte)):
            raise ValueError("a condition needs at least one of eq, in, gt, gte, lt, lte")
        return self


FilterValue = Scalar | list[Scalar] | Condition

SEARCH_EXAMPLES: dict[str, Example] = {
    "one query": {
        "summary": "One text query",
        "value": {"query": "vitamin D and bone fractures", "top_k": 5, "include": ["title"]},
    },
    "batch with filter": {
        "summary": "Two queries, metadata filter, minimum score",
        "value": {
            "queries": ["statins and muscle pain", "gene therapy for blindness"],
            "top_k": 10,
            "filter": {"year": {"gte": 2010}, "journal": ["Nature", "Science"]},
            "min_score": 0.3,
            "include": ["title", "metadata"],
        },
    },
}


INPUT_FIELDS = ("query", "queries", "vector", "vectors")


class SearchRequest(BaseModel):
    """Exactly one of `query`, `queries`, `vector`, `vectors`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [e["value"] for e in SEARCH_EXAMPLES.values()],
            # "exactly one of" in the schema: a body naming two of them matches two branches
            "oneOf": [{"required": [name]} for name in INPUT_FIELDS],
        },
    )

    query: QueryText | None = Field(None, description="One text query.")
    queries: list[QueryText] | None = Field(
        None, min_length=1, description="Several text queries, answered in order."
    )
    vector: list[Finite] | None = Field(
        None,
        min_length=1,
        description="One query embedding of the model's dimension. For cosine (InfoNCE) models it is "
        "L2-normalised by the server, so scores stay cosines; for AnInfoNCE it is used as given and the "
        "sqrt(Lambda) scaling is applied by the server. A zero vector, or one whose norm overflows, is 422.",
    )
    vectors: list[list[Finite]] | None = Field(None, min_length=1, description="Several query embeddings.")
    top_k: JsonInt = Field(
        10,
        ge=1,
        le=MAX_DEPTH,
        description="Hits per query (fewer if the corpus or filter has fewer).",
    )
    offset: JsonInt = Field(
        0,
        ge=0,
        le=MAX_DEPTH - 1,
        description="Hits to skip per query: the answer is ranks offset+1 .. offset+top_k of the same ranking "
        "(page n of size s: offset = (n-1)*s), exactly the tail of a search with top_k = offset + top_k. "
        f"offset + top_k may be at most this server's SEARCH_MAX_TOP_K ({MAX_DEPTH} at most); "
        "each page is searched afresh, so a document written between two pages can shift them.",
    )
    filter: dict[FilterField, FilterValue] | None = Field(
        None,
        max_length=MAX_FILTER_FIELDS,
        description="Metadata filter, all conditions must hold: {field: value} equality, {field: [a, b]} or "
        '{field: {"in": [a, b]}} any of, {field: {gte|gt|lte|lt: number}} numeric range; dotted field '
        "names reach into nested objects.",
    )
    min_score: Finite | None = Field(None, description="Drop hits scoring below this. " + SCORE_DOC)
    include: list[Literal["title", "text", "metadata"]] = Field(
        default_factory=list, description="Document fields to return with each hit."
    )
    mode: Literal["dense", "lexical", "hybrid"] | None = Field(
        None,
        description="dense (the encoder + vector index), lexical (BM25) or hybrid (both rankings fused). "
        "Unset: the live bundle's default, the mode that scored best on validation queries (GET /bundles); "
        "vector queries are always dense. Scores per mode: dense the learned similarity; lexical BM25 (> 0); "
        "hybrid the fused score (RRF: sum of 1/(k + rank), at most 2/(k+1); convex: weighted min-max "
        "normalised scores, in [0, 1]) — `min_score` applies to that score.",
    )

    @model_validator(mode="after")
    def _exactly_one_input(self) -> SearchRequest:
        given = [n for n in ("query", "queries", "vector", "vectors") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of query, queries, vector, vectors"
                + (f" (got {', '.join(given)})" if given else " (got none)")
            )
        values = sum(
            len(c.in_ or ()) + 1 for c in (self.filter or {}).values() if isinstance(c, Condition)
        ) + sum(len(c) for c in (self.filter or {}).values() if isinstance(c, list))
        if values > MAX_FILTER_VALUES:
            raise ValueError(f"filter: {values} values in all, at most {MAX_FILTER_VALUES}")
        if self.offset + self.top_k > MAX_DEPTH:
            raise ValueError(f"offset + top_k is {self.offset + self.top_k}, at most {MAX_DEPTH}")
        return self

    @property
    def texts(self) -> list[str] | None:
        if self.query is not None:
            return [self.query]
        return list(self.queries) if self.queries is not None else None

    @property
    def raw_vectors(self) -> list[list[float]] | None:
        if self.vector is not None:
            return [self.vector]
        return self.vectors

    @property
    def n_queries(self) -> int:
        return len(self.texts or self.raw_vectors or [])

    def filter_dict(self) -> dict[str, Any] | None:
        if not self.filter:
            return None
        # the document store's format: scalar = equality, {"in": [...]}, {"gte": ...}
        out: dict[str, Any] = {}
        for name, cond in self.filter.items():
            if isinstance(cond, Condition):
                out[name] = cond.model_dump(exclude_none=True, by_alias=True)
            elif isinstance(cond, list):
                out[name] = {"in": cond}
            else:
                out[name] = cond
        return out


class Hit(BaseModel):
    id: str = Field(description="Document id (as in the corpus).")
    score: float = Field(description=SCORE_DOC)
    title: str | None = None
    text: str | None = None
    metadata: dict[str, Any] | None = None


class QueryResult(BaseModel):
    hits: list[Hit] = Field(description="Best first.")
    search_id: str | None = Field(
        None,
        description="Signed id of this ranking (collection, version, mode, the ids shown, time): send it "
        "with a judgment (POST /feedback) to tie it to what was shown.",
    )


class Timings(BaseModel):
    encode_ms: float = Field(description="Query encoding (shared by a micro-batch).")
    search_ms: float = Field(description="Index search (shared by a micro-batch).")
    total_ms: float = Field(description="From request parsed to response built, on the server.")


ScoreKind = Literal["cosine", "aninfonce", "bm25", "rrf", "convex"]


class SearchResponse(BaseModel):
    version: str = Field(description="Bundle version that answered.")
    metric: Literal["cosine", "aninfonce"] = Field(
        description="The live model's learned similarity: what dense scores are, and the dense side of a "
        "hybrid one. `score_kind` says what this answer's scores are."
    )
    results: list[QueryResult] = Field(description="One entry per query, in request order.")
    timings: Timings
    mode: Literal["dense", "lexical", "hybrid"] = Field(
        "dense", description="The retrieval mode that answered."
    )
    score_kind: ScoreKind = Field(
        description="What the hits' scores are: the model's similarity (`cosine` or `aninfonce`, as "
        "`metric`) in dense mode; `bm25` (Lucene's BM25, unbounded, >= 0) in lexical mode; in hybrid mode "
        "the fusion the bundle tuned: `rrf` (sum of 1/(k + rank), at most 2/(k+1)) or `convex` "
        "(alpha * dense + (1 - alpha) * lexical, each min-max normalised, in [0, 1]).",
    )


class GapResponse(BaseModel):
    version: str
    model: dict[str, Any] = Field(description="Identity of the live model (from the bundle manifest).")
    report: GapReport
    live: dict[str, Any] | None = Field(
        None,
        description="The InfoNCE risk on the positive judgments (POST /feedback) of this version, same k and "
        "τ as `report.risk_test`, its 95% interval, the verdict against the prediction (`rule`), the "
        "number of judgments and queries it rests on, MRR and nDCG@10 of the judged documents "
        "(docs/gap-report.md). Judgments are a biased sample of traffic.",
    )


class ReadyResponse(BaseModel):
    status: Literal["ready"]
    version: str
    n_vectors: int
    canary_hits: int
