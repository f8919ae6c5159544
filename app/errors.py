"""Every error the API returns, from one table (text-embeddings-inference style).

ServiceError                 base (500 internal)
├── NotReadyError            503 not_ready: /readyz checks failed (the reason is in the message)
├── QueueFullError           429 queue_full: the micro-batching queue is at `queue_max`
├── MissingApiKeyError       401 missing_api_key
├── WrongApiKeyError         403 forbidden: wrong key, or no key configured on the server
├── BodyTooLargeError        413 body_too_large
├── ReportMissingError       404 report_missing: the live bundle has no generalization-gap report
├── MissingFileError         404 file_not_found: no such plot in a bundle's report, or no such page asset
├── DimensionMismatchError   409 dimension_mismatch: a query vector of another length than the live model's
├── TooLargeError            413: within the spec's limits, over a budget JSON Schema cannot state
│   ├── TokenBudgetError     413 token_budget: more tokens than max_request_tokens
│   └── ResponseTooLargeError 413 response_too_large: the answer would exceed max_response_bytes
└── InvalidInputError        422 invalid_request: a well-formed body the bundle cannot answer (vector dim)

Domain errors from `contract.errors` map through `DOMAIN_STATUS` (most specific class wins); among
them `NoLiveBundle`, 503 no_live_bundle: nothing is loaded yet, or CURRENT is missing. Request
shape errors come from pydantic and are reshaped to the same body, one plain sentence per field
(app/field_errors.py), naming where it is:
`{"error": {"code": "invalid_request", "message": "body.top_k: must be …", "details": [...]}}`.
Anything else is a 500 with a generic message; its stack trace goes to the log, never to the client.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.field_errors import field_errors
from contract import errors as domain
from contract.mutations.log import MutationLogError

logger = logging.getLogger(__name__)


class ServiceError(Exception):
    status_code = 500
    code = "internal"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.headers = headers
        self.param = param  # the request field at fault (OpenAI's `param`, on the /v1 routes)


class NotReadyError(ServiceError):
    status_code = 503
    code = "not_ready"


class QueueFullError(ServiceError):
    status_code = 429
    code = "queue_full"


class MissingApiKeyError(ServiceError):
    status_code = 401
    code = "missing_api_key"


class WrongApiKeyError(ServiceError):
    status_code = 403
    code = "forbidden"


class BodyTooLargeError(ServiceError):
    status_code = 413
    code = "body_too_large"


class ReportMissingError(ServiceError):
    status_code = 404
    code = "report_missing"


class MissingFileError(ServiceError):
    status_code = 404
    code = "file_not_found"


class TooLargeError(ServiceError):
    """A request within every limit the spec states, over a budget JSON Schema cannot state: its tokens
    (SEARCH_MAX_REQUEST_TOKENS) or its answer's bytes (SEARCH_MAX_RESPONSE_BYTES)."""

    status_code = 413
    code = "too_large"


class DimensionMismatchError(ServiceError):
    """A query vector whose length is not the live model's dimension: well-formed (the spec cannot know
    the dimension: it is the live bundle's, and a hot swap may change it), in conflict with what serves."""

    status_code = 409
    code = "dimension_mismatch"


class InvalidInputError(ServiceError):
    status_code = 422
    code = "invalid_request"


class ResponseTooLargeError(TooLargeError):
    code = "response_too_large"


class TokenBudgetError(TooLargeError):
    code = "token_budget"


# contract.errors class -> HTTP status; looked up along the exception's MRO
DOMAIN_STATUS: dict[type[domain.InfonceSearchError], int] = {
    domain.NoLiveBundle: 503,
    domain.BundleDamaged: 503,  # this replica stops answering from it and falls back to an older version
    domain.IndexUnavailable: 503,  # Milvus unreachable: the search may succeed once it is back
    domain.BundleNotFound: 404,
    domain.BundleInvalid: 409,  # activation refused; the old bundle keeps serving
    domain.ModelLoadError: 409,
    domain.BundleError: 409,
    domain.IndexBuildError: 422,
    domain.InvalidQuery: 422,  # a search the index cannot answer as asked: the client's input
    domain.DataError: 422,
    domain.ConfigError: 422,
    domain.CollectionRefused: 400,  # confined like dataset names (docs/security.md)
    domain.CollectionNotFound: 404,
    domain.CollectionConflict: 409,
    domain.JobError: 409,
    domain.JobNotFound: 404,
    domain.JobConflict: 409,
    domain.DatasetRefused: 400,
    domain.DatasetNotFound: 404,
    domain.JobOptionsInvalid: 422,
    domain.JobCancelled: 409,
    MutationLogError: 503,  # the shared log cannot be written: nothing was applied, retry
}


def domain_status(exc: domain.InfonceSearchError) -> int:
    for cls in type(exc).__mro__:
        if cls in DOMAIN_STATUS:
            return DOMAIN_STATUS[cls]
    return 500


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return {"error": body}


# OpenAI's error `type` per status, for the OpenAI-compatible routes (/v1/…, also under a collection)
OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def openai_route(request: Request) -> bool:
    """/v1/… or /collections/{name}/v1/… (a collection may be named v1: only that segment counts)."""
    parts = request.url.path.split("/")
    return parts[1:2] == ["v1"] or (parts[1:2] == ["collections"] and parts[3:4] == ["v1"])


def respond(
    request: Request,
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    """The one error answer: `{"error": {"code", "message", "details"?}}`; on the OpenAI-compatible
    routes OpenAI's shape as well (`type` and `param` added), which its clients (the `openai` package,
    LangChain) read to raise their own typed errors."""
    body = error_body(code, message, details)
    if openai_route(request):
        if param is None and details:
            param = str(details[0]["field"]).removeprefix("body.").split(".")[0] or None
        body["error"]["type"] = OPENAI_TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        body["error"]["param"] = param
    return JSONResponse(body, status_code=status, headers=headers)


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    if exc.status_code >= 500 and exc.status_code != 503:
        logger.warning("%s %s -> %d %s: %s", request.method, request.url.path, exc.status_code, exc.code, exc)
    return respond(request, exc.status_code, exc.code, exc.message, headers=exc.headers, param=exc.param)


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, domain.InfonceSearchError)
    status = domain_status(exc)
    # nothing live is a state, not a fault: every request says so until a bundle loads
    log = logger.error if status >= 500 and not isinstance(exc, domain.NoLiveBundle) else logger.info
    log("%s %s -> %d %s: %s", request.method, request.url.path, status, exc.code, exc)
    return respond(request, status, exc.code, str(exc))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details: list[dict[str, Any]] = list(field_errors(exc.errors()))
    message = "; ".join(f"{d['field']}: {d['message']}" for d in details) or "invalid request"
    return respond(request, 422, "invalid_request", message, details)


# FastAPI's answer when the body is not decodable JSON (invalid UTF-8, another charset, nesting deeper
# than the parser's recursion limit); truncated JSON is already a validation error. One code for all.
FASTAPI_BODY_PARSE_ERROR = "There was an error parsing the body"


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == FASTAPI_BODY_PARSE_ERROR:
        details = [{"field": "body", "message": "not parseable as UTF-8 JSON", "type": "json_invalid"}]
        message = "body: not parseable as JSON (send UTF-8 JSON, nested at most a few hundred levels)"
        return respond(request, 422, "invalid_request", message, details)
    if exc.status_code == 405:
        return _method_not_allowed(request)
    codes = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}
    code = codes.get(exc.status_code, "http_error")
    return respond(request, exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))


def _flat_routes(routes: Any) -> Any:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI wraps include_router()'s routes
        yield from _flat_routes(included.routes) if included is not None else (route,)


def _method_not_allowed(request: Request) -> Response:
    """Starlette's 405 names only the first route matching the path; list every route's methods.

    OPTIONS on a known path answers 204 with that `Allow` list (e.g. GET, POST for /jobs)."""
    matched: dict[str, set[str]] = {}
    for route in _flat_routes(request.app.router.routes):
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            matched.setdefault(getattr(route, "path", ""), set()).update(
                getattr(route, "methods", None) or ()
            )
    # the most specific path template, as the spec lists it: /documents/delete (POST) rather than
    # /documents/{doc_id} (GET, DELETE), which its URL also matches
    fewest = min((p.count("{") for p in matched), default=0)
    methods = {m for p, ms in matched.items() if p.count("{") == fewest for m in ms}
    methods.add("OPTIONS")
    allow = ", ".join(sorted(methods))
    if request.method == "OPTIONS":
        return Response(status_code=204, headers={"Allow": allow})
    message = f"{request.method} is not allowed on {request.url.path} (allowed: {allow})"
    return respond(request, 405, "method_not_allowed", message, headers={"Allow": allow})


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return respond(request, 500, "internal", "internal server error (see the server log)")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(domain.InfonceSearchError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
