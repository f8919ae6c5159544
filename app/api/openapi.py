"""The OpenAPI document, with the one error shape every route answers in.

FastAPI documents validation failures with its own `HTTPValidationError` body, but app/errors.py
answers every error, 422 included, as `{"error": {"code", "message", "details"?}}`. This rewrites every
4xx/5xx response of the generated spec to that shape (`ErrorResponse`), declares 422 wherever a request
can be malformed and 413 wherever a body is read, so the spec matches what the server sends
(tests/app/test_reliability.py runs schemathesis against it).

The key headers and the operation ids: app/api/openapi_ids.py.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field, TypeAdapter

from app.api.openapi_ids import state_security
from app.api.routes.jobs import REQUEST_SCHEMA_KEY, JobSubmissionSpec
from app.engine.token_input import token_vocab_size
from app.schemas.search import INT64_MAX, INT64_MIN
from app.settings import Settings
from contract.bundles.collections import NAME_PATTERN


class ErrorField(BaseModel):
    field: str = Field(description="Where: `body.top_k`, `query.limit`, `body`, …")
    message: str
    type: str


class ErrorInfo(BaseModel):
    code: str = Field(description="Stable machine-readable code (invalid_request, no_live_bundle, …).")
    message: str = Field(description="One sentence for humans; names the offending field.")
    details: list[ErrorField] | None = Field(None, description="Per-field problems (422 only).")
    type: str | None = Field(
        None,
        description="OpenAI-compatible routes (/v1/…) only: OpenAI's error type (invalid_request_error, …).",
    )
    param: str | None = Field(None, description="OpenAI-compatible routes (/v1/…) only: the field at fault.")


class ErrorResponse(BaseModel):
    error: ErrorInfo


ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
FASTAPI_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _error_content() -> dict[str, Any]:
    return {"application/json": {"schema": ERROR_REF}}


_KEYWORD_TYPE = {"maxLength": "string", "maxItems": "array", "maximum": "integer", "maxProperties": "object"}


def _lower(schema: dict[str, Any], keyword: str, value: int) -> None:
    """Set `keyword` (at most `value`) on the variants of `schema` it applies to (through anyOf)."""
    for variant in schema.get("anyOf", [schema]):
        if variant.get("type") == _KEYWORD_TYPE[keyword]:
            variant[keyword] = min(value, variant.get(keyword, value))


def _each_text(schema: dict[str, Any], max_chars: int, max_items: int) -> None:
    """A text-or-texts property: every string at most `max_chars`, every list at most `max_items`."""
    _lower(schema, "maxLength", max_chars)
    _lower(schema, "maxItems", max_items)
    for variant in schema.get("anyOf", [schema]):
        if variant.get("type") == "array" and isinstance(variant.get("items"), dict):
            _lower(variant["items"], "maxLength", max_chars)


def _openai_input(schema: dict[str, Any], settings: Settings) -> None:
    """/v1/embeddings' input: texts as /embed's; token ids below the vocabulary size of the encoding they
    are decoded with (when it loads here), at most SEARCH_MAX_BATCH arrays of them."""
    vocab = token_vocab_size(settings.openai_token_encoding)
    for variant in schema.get("anyOf", []):
        items = variant.get("items") if isinstance(variant.get("items"), dict) else {}
        if variant.get("type") == "string" or items.get("type") == "string":
            _each_text({"anyOf": [variant]}, settings.max_query_chars, settings.max_batch)
        elif items.get("type") == "array":  # several token arrays
            _lower(variant, "maxItems", settings.max_batch)
            if vocab:
                _lower(items["items"], "maximum", vocab - 1)
        elif items.get("type") == "integer" and vocab:  # one token array
            _lower(items, "maximum", vocab - 1)


def state_limits(schemas: dict[str, Any], settings: Settings) -> None:
    """This server's SEARCH_MAX_* limits written into the request schemas, so the spec says what the
    server enforces (issue 27, item 12): a request the spec calls valid is never refused for its size,
    except for the budgets JSON Schema cannot state (tokens, the answer's bytes: 413)."""
    search = schemas["SearchRequest"]["properties"]
    for name in ("query", "queries"):
        _each_text(search[name], settings.max_query_chars, settings.max_batch)
    _lower(search["vectors"], "maxItems", settings.max_batch)
    for variant in search["vectors"].get("anyOf", []):
        if variant.get("type") == "array":
            variant["items"]["minItems"] = 1  # as `vector`; the length itself is the live model's (409)
    _lower(search["top_k"], "maximum", settings.max_top_k)
    # offset + top_k <= max_top_k compares two fields, which JSON Schema cannot: the bound on each is
    # stated here, the sum in words (SearchRequest.offset's description) and enforced by a 422
    _lower(search["offset"], "maximum", settings.max_top_k - 1)
    _lower(search["filter"], "maxProperties", settings.max_filter_fields)
    _each_text(schemas["EmbedRequest"]["properties"]["input"], settings.max_query_chars, settings.max_batch)
    _openai_input(schemas["OpenAIEmbeddingRequest"]["properties"]["input"], settings)
    _lower(schemas["UpsertRequest"]["properties"]["documents"], "maxItems", settings.max_documents_batch)
    _lower(schemas["DeleteRequest"]["properties"]["ids"], "maxItems", settings.max_documents_batch)
    for name in ("text", "title"):
        _lower(schemas["DocumentIn"]["properties"][name], "maxLength", settings.max_document_chars)


# a dataset or model name the server refuses before looking (contract/jobs/confine.py: 400): surrounding
# white space, a NUL, an absolute path, a `..` segment, or a name that is the root itself (`.`, `./`)
# (white space as Python's str.strip sees it: JSON Schema's \s lacks U+001C-U+001F and U+0085)
REFUSED_NAME = r"^[\s\u001c-\u001f\u0085]|[\s\u001c-\u001f\u0085]$|\u0000|^/|(^|/)\.\.(/|$)|^[./]*$"
# TrainConfig's rules across fields, which JSON Schema cannot compare; stated here for readers
CROSS_FIELD_RULES = (
    " Rules across fields (a 422 names them): hard_negative_rank_max > hard_negative_rank_min;"
    " decoupled, debiased_tau_plus > 0 and learn_temperature only with loss=infonce;"
    " decoupled and debiased_tau_plus > 0 not both."
)


def state_names(schemas: dict[str, Any]) -> None:
    """What confine.py refuses by the name alone, in the spec (the rest depends on the disk: 400/404)."""
    for job in ("RetrainJob", "ReindexJob"):
        schemas[job]["properties"]["dataset"]["not"] = {"pattern": REFUSED_NAME}
    options = schemas["RetrainOptions"]
    for variant in options["properties"]["base_model"]["anyOf"]:
        if variant.get("type") == "string":
            variant.update(minLength=1, maxLength=255, **{"not": {"pattern": REFUSED_NAME}})
    options["description"] = (options.get("description") or "") + CROSS_FIELD_RULES


def _state_filter(schemas: dict[str, Any]) -> None:
    """A filter's field names all match its key pattern (patternProperties alone lets others through),
    a condition names at least one operator, and the list shorthand holds 1..1000 values, as
    contract/index/docstore.py compile_filter enforces."""
    for variant in schemas["SearchRequest"]["properties"]["filter"].get("anyOf", []):
        if variant.get("type") != "object":
            continue
        (pattern, value), *_ = variant["patternProperties"].items()
        variant["propertyNames"]["pattern"] = pattern
        for choice in value.get("anyOf", []):
            if choice.get("type") == "array":
                choice.update(minItems=1, maxItems=1000)
    schemas["Condition"]["minProperties"] = 1
    # an operator given as null counts as absent (Condition._some_condition): one must be non-null
    schemas["Condition"]["anyOf"] = [
        {"required": [op], "properties": {op: {"not": {"type": "null"}}}}
        for op in ("eq", "in", "gt", "gte", "lt", "lte")
    ]


def state_collection_names(spec: dict[str, Any]) -> None:
    """A collection or alias name is `NAME_PATTERN` (contract/bundles/collections.py), in the path and in
    the bodies that name one: the spec says so, the server keeps its own answer to any other name (400
    `collection_refused`, naming the rule) rather than FastAPI's 422."""
    schemas = spec["components"]["schemas"]
    for model, field in (("CollectionCreate", "name"), ("AliasBody", "collection")):
        if model in schemas:
            schemas[model]["properties"][field]["pattern"] = NAME_PATTERN
    if "CollectionCreate" in schemas:  # its options are a retrain job's, checked as such (422 otherwise)
        options = schemas["CollectionCreate"]["properties"]["options"]
        schemas["CollectionCreate"]["properties"]["options"] = {
            "$ref": "#/components/schemas/RetrainOptions",
            "description": options.get("description", ""),
        }
    for operations in spec.get("paths", {}).values():
        for op in operations.values():
            for parameter in op.get("parameters", []):
                if parameter.get("in") == "path" and parameter.get("name") in ("collection", "alias"):
                    parameter["schema"]["pattern"] = NAME_PATTERN


# a metadata value as app/schemas/documents.py accepts it: JSON, with integers that fit SQLite's 64 bits (a
# number with a fraction is any finite float; JSON has no other numbers)
JSON_VALUE: dict[str, Any] = {
    "description": "Any JSON value; integers within 64 bits (SQLite's), nested at most 32 levels.",
    "anyOf": [
        {"type": "string"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}},
    ],
}


def state_metadata(schemas: dict[str, Any]) -> None:
    """What a document's metadata may hold, where the server checks it (422 otherwise)."""
    schemas["JsonValue"] = JSON_VALUE
    schemas["DocumentIn"]["properties"]["metadata"]["additionalProperties"] = {
        "$ref": "#/components/schemas/JsonValue"
    }


def build_openapi(app: FastAPI, settings: Settings | None = None) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for name in FASTAPI_ERROR_SCHEMAS:
        schemas.pop(name, None)
    error_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(error_schema.pop("$defs", {}))
    schemas["ErrorResponse"] = error_schema
    typed = TypeAdapter(JobSubmissionSpec).json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(typed.pop("$defs", {}))
    schemas["JobSubmissionSpec"] = typed
    state_names(schemas)
    _state_filter(schemas)
    # exactly one of the four query fields, each nullable: JSON Schema says it as oneOf over "given"
    schemas["SearchRequest"]["oneOf"] = [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in ("query", "queries", "vector", "vectors")
    ]
    if settings is not None:
        state_limits(schemas, settings)
    state_security(spec, app.routes)
    state_collection_names(spec)
    state_metadata(schemas)
    for operations in spec.get("paths", {}).values():
        for method, op in operations.items():
            if op.pop(REQUEST_SCHEMA_KEY, None):
                body = op["requestBody"]["content"]["application/json"]
                body["schema"] = {"$ref": "#/components/schemas/JobSubmissionSpec"}
            responses = op.setdefault("responses", {})
            if op.get("parameters") or op.get("requestBody"):
                responses.setdefault(
                    "422", {"description": "Malformed request; `error.details` names each offending field."}
                )
            if method in ("post", "put", "patch"):
                responses.setdefault("413", {"description": "Body larger than SEARCH_MAX_BODY_BYTES."})
            for status, response in responses.items():
                if status[0] in "45":
                    response["content"] = _error_content()
    app.openapi_schema = spec
    return spec


def install_openapi(app: FastAPI, settings: Settings | None = None) -> None:
    app.openapi = lambda: build_openapi(app, settings)  # type: ignore[method-assign]
