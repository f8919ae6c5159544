"""The OpenAPI document, with the one error shape every route answers in.

FastAPI documents validation failures with its own `HTTPValidationError` body, but app/errors.py
answers every error, 422 included, as `{"error": {"code", "message", "details"?}}`. This rewrites every
4xx/5xx response of the generated spec to that shape (`ErrorResponse`), declares 422 wherever a request
can be malformed and 413 wherever a body is read, so the spec matches what the server sends
(tests/app/test_reliability.py runs schemathesis against it).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field, TypeAdapter

from app.api.routes.jobs import REQUEST_SCHEMA_KEY, JobSubmissionSpec


class ErrorField(BaseModel):
    field: str = Field(description="Where: `body.top_k`, `query.limit`, `body`, …")
    message: str
    type: str


class ErrorInfo(BaseModel):
    code: str = Field(description="Stable machine-readable code (invalid_request, no_live_bundle, …).")
    message: str = Field(description="One sentence for humans; names the offending field.")
    details: list[ErrorField] | None = Field(None, description="Per-field problems (422 only).")


class ErrorResponse(BaseModel):
    error: ErrorInfo


ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
FASTAPI_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _error_content() -> dict[str, Any]:
    return {"application/json": {"schema": ERROR_REF}}


def build_openapi(app: FastAPI) -> dict[str, Any]:
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


def install_openapi(app: FastAPI) -> None:
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
