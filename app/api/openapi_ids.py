"""The OpenAPI spec's names for what a client needs (issue 32): the two ways of sending the API key as
`securitySchemes` (so /docs has an Authorize button), `security` on each operation that reads the key
(required on the mutating routes, optional on the reads that say more to the key holder), and readable
operation ids (`search`, `upsert_documents`, `delete_document`, …; the copies under
/collections/{collection}/ end in `_in_collection`), the method names a generated client takes.

The operations are found from the routes' own dependencies (app/api/deps.py), not from a list kept here,
so a new route guarded by the key is documented as such (tests/app/test_openapi_surface.py checks the
spec against what each route answers without the key).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.api.deps import has_api_key, require_api_key, require_feedback_key

# the route's function name, where it reads well as a method name; a name not here is its own id
READABLE_IDS = {
    "upsert": "upsert_documents",
    "delete_many": "delete_documents",
    "delete_one": "delete_document",
    "activate": "activate_bundle",
    "metrics": "prometheus_metrics",
    "page": "web_page",
    "asset": "web_page_asset",
    "overview": "web_page_overview",
    "plot": "report_plot",
}
SCOPED_SUFFIX = "_in_collection"  # app/api/collection_scope.py names each copy so


def operation_id(route: APIRoute) -> str:
    """FastAPI's `generate_unique_id_function`: `delete_document`, not
    `delete_one_documents__doc_id__delete` (the default: name, path and method run together)."""
    base = route.name.removesuffix(SCOPED_SUFFIX)
    return READABLE_IDS.get(base, base) + route.name[len(base) :]


# the two headers app/api/deps.py reads the key from; either one is enough
SECURITY_SCHEMES: dict[str, Any] = {
    "ApiKeyHeader": {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "The server's SEARCH_API_KEY (`make demo` prints one).",
    },
    "BearerKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "The same key as `Authorization: Bearer <key>` (what OpenAI clients send).",
    },
}
KEY_REQUIRED: list[dict[str, list[str]]] = [{name: []} for name in SECURITY_SCHEMES]
KEY_OPTIONAL: list[dict[str, list[str]]] = [{}, *KEY_REQUIRED]  # `{}`: no key is also an answer


def _calls(dependant: Dependant) -> set[Any]:
    """Every function a route depends on, through sub-dependencies."""
    found: set[Any] = set()
    for sub in dependant.dependencies:
        found.add(sub.call)
        found |= _calls(sub)
    return found


def _api_routes(routes: list[Any]) -> Iterator[tuple[APIRoute, str, set[str]]]:
    """Each API route with the path and methods it is served at. FastAPI 0.16x keeps included routers
    as branches (`iter_route_contexts` walks them); older releases copy every route into `app.routes`."""
    try:
        from fastapi.routing import iter_route_contexts  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # fastapi < 0.16x
        for route in routes:
            if isinstance(route, APIRoute) and route.include_in_schema:
                yield route, route.path_format, set(route.methods or ())
        return
    for context in iter_route_contexts(routes):
        route = context.original_route
        if isinstance(route, APIRoute) and context.include_in_schema:
            yield route, context.path_format or route.path_format, set(context.methods or ())


def state_security(spec: dict[str, Any], routes: list[Any]) -> None:
    """`securitySchemes`, and `security` on each operation whose route reads the key: required where
    `require_api_key` (or `require_feedback_key`) guards it, optional where `has_api_key` only widens the answer."""
    spec.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for route, path, methods in _api_routes(routes):
        calls = _calls(route.dependant)
        if require_api_key in calls or require_feedback_key in calls:
            security = KEY_REQUIRED
        elif has_api_key in calls:
            security = KEY_OPTIONAL
        else:
            continue
        operations = spec["paths"].get(path, {})
        for method in methods:
            if method.lower() in operations:
                operations[method.lower()]["security"] = security
