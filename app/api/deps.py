"""FastAPI dependencies: the lifespan state as typed aliases, and the API-key check."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from app.engine.batching import DirectRunner, MicroBatcher
from app.errors import MissingApiKeyError, WrongApiKeyError
from app.live.collections import CollectionRegistry
from app.live.hot_swap import HotSwap
from app.live.mutation_applier import MutationApplier
from app.metrics import AppMetrics
from app.settings import Settings


def get_settings(request: Request) -> Settings:
    return request.state.settings


def get_hot_swap(request: Request) -> HotSwap:
    return request.state.hot_swap


def get_mutations(request: Request) -> MutationApplier:
    """The document writes (app/live/mutation_applier.py) of this process's HotSwap."""
    hot_swap: HotSwap = request.state.hot_swap
    return hot_swap.mutations


def get_collections(request: Request) -> CollectionRegistry:
    """The collections this process serves (app/live/collections.py)."""
    return request.state.collections


def get_collection_name(request: Request) -> str | None:
    """The collection a request under /collections/{collection}/ is about (resolved from an alias);
    None on the routes of old, which serve `default` (app/api/collection_scope.py sets it)."""
    return request.state.collection


def get_runner(request: Request) -> MicroBatcher | DirectRunner:
    return request.state.runner


def get_metrics(request: Request) -> AppMetrics:
    return request.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
HotSwapDep = Annotated[HotSwap, Depends(get_hot_swap)]
RunnerDep = Annotated[MicroBatcher | DirectRunner, Depends(get_runner)]
MutationsDep = Annotated[MutationApplier, Depends(get_mutations)]
MetricsDep = Annotated[AppMetrics, Depends(get_metrics)]
CollectionsDep = Annotated[CollectionRegistry, Depends(get_collections)]
CollectionScope = Annotated[str | None, Depends(get_collection_name)]


def _given_key(request: Request) -> str | None:
    given = request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    if given is None and auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    return given or None


def has_api_key(request: Request, settings: SettingsDep) -> bool:
    """Read routes with more detail for the key holder: False without a key, 403 for a wrong one."""
    if _given_key(request) is None:
        return False
    require_api_key(request, settings)
    return True


def require_api_key(request: Request, settings: SettingsDep) -> None:
    """Mutating routes: header `X-API-Key: <key>` or `Authorization: Bearer <key>`."""
    if settings.api_key is None:
        raise WrongApiKeyError(
            "this server has no API key configured (SEARCH_API_KEY), so mutating routes are disabled"
        )
    given = _given_key(request)
    if not given:
        raise MissingApiKeyError(
            "this route needs an API key: send it as 'X-API-Key: <key>' or 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(given.encode(), settings.api_key.encode()):
        raise WrongApiKeyError("wrong API key")


ApiKeyDep = Depends(require_api_key)
