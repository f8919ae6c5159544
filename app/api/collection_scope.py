"""Every per-collection route of old, again under `/collections/{collection}/`: the same endpoint
functions, behind one dependency that points the request at the named collection.

The old routes read the served bundle from the request's state (`hot_swap`, `settings`: app/api/deps.py).
`use_collection` runs before a route's own dependencies (FastAPI solves a router's dependencies first),
resolves the name (an alias is followed once: contract/bundles/collections.py), loads the collection if
it is not loaded (app/live/collections.py) and puts that collection's HotSwap and Settings in the
request's state, so the route then runs exactly as it does for `default`. The request's answer carries
`X-Collection` (the collection that served it) and, when this request waited for the collection to
load, `X-Collection-Load-Ms`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response, params
from fastapi import Path as PathParam
from fastapi.routing import APIRoute

from app.api.deps import require_api_key, require_feedback_key
from app.live.collections import CollectionRegistry
from contract.defaults import DEFAULT_COLLECTION

PREFIX = "/collections/{collection}"
CollectionPath = Annotated[
    str,
    PathParam(
        max_length=256,
        description="A collection name, or an alias of one (`^[a-z0-9][a-z0-9_-]{0,62}$`; "
        "`default` is the collection the routes without this prefix serve).",
        examples=[DEFAULT_COLLECTION],
    ),
]


async def use_collection(
    request: Request, response: Response, collection: CollectionPath
) -> AsyncIterator[None]:
    registry: CollectionRegistry = request.state.collections
    # a few stat() calls (the aliases file, the folder): cheaper inline than a hop to a thread, and done on
    # every request, so a collection another replica deleted or an alias it flipped is seen at once
    name, _ = registry.resolve(collection)  # 400 refused name, 404 unknown
    served, waited = await registry.get(name)
    request.state.hot_swap = served.hot_swap
    request.state.settings = served.settings
    request.state.collection = name
    response.headers["X-Collection"] = name
    if waited is not None:
        response.headers["X-Collection-Load-Ms"] = f"{waited * 1000:.1f}"
    with registry.using(served):
        yield


COLLECTION_ERRORS: dict[int, str] = {
    400: "Not a collection or alias name (`collection_refused`).",
    404: "No collection or alias with that name (`collection_not_found`).",
}


def _with_collection_errors(responses: dict[int | str, Any]) -> dict[int | str, Any]:
    """The route's documented answers plus the ones naming a collection adds."""
    out = dict(responses)
    for status, text in COLLECTION_ERRORS.items():
        given = out.get(status) or {}
        described = given.get("description")
        out[status] = {**given, "description": f"{described} Or: {text}" if described else text}
    return out


def _key_first(dependencies: Sequence[params.Depends]) -> list[params.Depends]:
    """The route's own dependencies behind `use_collection`, but its API key check before it: a request
    without the key is 401 whether or not the collection exists (a 404 first would tell who asks which
    collections exist)."""
    checks = (require_api_key, require_feedback_key)
    key = [d for d in dependencies if d.dependency in checks]
    rest = [d for d in dependencies if d.dependency not in checks]
    return [*key, Depends(use_collection), *rest]


def scoped_router(routers: Iterable[APIRouter], *, skip: Iterable[str] = ()) -> APIRouter:
    """A copy of each route of `routers` (all but the paths in `skip`) under PREFIX, behind
    `use_collection`: the same endpoint, response model, status, responses and summary. Copied rather
    than included with a prefix, so each copy is a route of its own whose path template is the prefixed
    one (the request metrics read it)."""
    out = APIRouter()
    skipped = set(skip)
    for router in routers:
        for r in router.routes:
            if not isinstance(r, APIRoute) or r.path in skipped:
                continue
            out.add_api_route(
                PREFIX + r.path,
                r.endpoint,
                response_model=r.response_model,
                status_code=r.status_code,
                tags=list(r.tags),
                dependencies=_key_first(r.dependencies),
                summary=r.summary,
                description=r.description,
                response_description=r.response_description,
                responses=_with_collection_errors(r.responses),
                deprecated=r.deprecated,
                methods=sorted(r.methods or ()),
                response_model_include=r.response_model_include,
                response_model_exclude=r.response_model_exclude,
                response_model_by_alias=r.response_model_by_alias,
                response_model_exclude_unset=r.response_model_exclude_unset,
                response_model_exclude_defaults=r.response_model_exclude_defaults,
                response_model_exclude_none=r.response_model_exclude_none,
                include_in_schema=r.include_in_schema,
                response_class=r.response_class,
                name=f"{r.name}_in_collection",
                openapi_extra=r.openapi_extra,
            )
    return out


def mount(app: FastAPI, routers: Iterable[APIRouter], *, skip: Iterable[str] = ()) -> set[str]:
    """Add the per-collection copies of the routes; returns the paths they were copied from (the routes
    of old that serve `default`, for the request metrics' `collection` label)."""
    routers = list(routers)
    app.include_router(scoped_router(routers, skip=skip))
    return {
        r.path
        for router in routers
        for r in router.routes
        if isinstance(r, APIRoute) and r.path not in set(skip)
    }
