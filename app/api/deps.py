"""FastAPI dependencies: the lifespan state as typed aliases, and the API-key check.

The state getters are `async def` although they only read an attribute: FastAPI runs a plain `def`
dependency in the thread pool, a thread hand-off each, four of them on every POST /search
(bench/serving/request_profile.py; docs/benchmarks.md's request profile)."""

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


async def get_settings(request: Request) -> Settings:
    return request.state.settings


async def get_hot_swap(request: Request) -> HotSwap:
    return request.state.hot_swap


async def get_mutations(request: Request) -> MutationApplier:
    """The document writes (app/live/mutation_applier.py) of this process's HotSwap."""
    hot_swap: HotSwap = request.state.hot_swap
    return hot_swap.mutations


async def get_collections(request: Request) -> CollectionRegistry:
    """The collections this process serves (app/live/collections.py)."""
    return request.state.collections


async def get_collection_name(request: Request) -> str | None:
    """The collection a request under /collections/{collection}/ is about (resolved from an alias);
    None on the routes of old, which serve `default` (app/api/collection_scope.py sets it)."""
    return request.state.collection


async def get_runner(request: Request) -> MicroBatcher | DirectRunner:
    return request.state.runner


async def get_metrics(request: Request) -> AppMetrics:
    return request.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
HotSwapDep = Annotated[HotSwap, Depends(get_hot_swap)]
RunnerDep = Annotated[MicroBatcher | DirectRunner, Depends(get_runner)]
MutationsDep = Annotated[MutationApplier, Depends(get_mutations)]
MetricsDep = Annotated[AppMetrics, Depends(get_metrics)]
CollectionsDep = Annotated[CollectionRegistry, Depends(get_collections)]
CollectionScope = Annotated[str | None, Depends(get_collection_name)]


def given_keys(request: Request) -> list[str]:
    """Every key the request sends: each `X-API-Key` header and each `Authorization: Bearer` one.

    The one rule (docs/security.md): an empty header is not a key (it hides nothing); every key sent must
    be the right one, so two headers that disagree are refused whichever comes first."""
    keys = [v.strip() for v in request.headers.getlist("x-api-key")]
    for auth in request.headers.getlist("authorization"):
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() == "bearer":
            keys.append(value.strip())
    return [k for k in keys if k]


def has_api_key(request: Request) -> bool:
    """Read routes with more detail for the key holder: False without a key, 403 for a wrong one."""
    if not given_keys(request):
        return False
    require_api_key(request)
    return True


def require_api_key(request: Request) -> None:
    """Mutating routes: header `X-API-Key: <key>` or `Authorization: Bearer <key>`.

    The settings are read from the request, not through SettingsDep: a collection route checks the key
    before `use_collection` puts the collection's settings on the request (app/api/collection_scope.py),
    and FastAPI would cache the server's settings for the rest of the request. The key is the server's."""
    settings: Settings = request.state.settings
    if settings.api_key is None:
        raise WrongApiKeyError(
            "this server has no API key configured (SEARCH_API_KEY), so mutating routes are disabled"
        )
    given = given_keys(request)
    if not given:
        raise MissingApiKeyError(
            "this route needs an API key: send it as 'X-API-Key: <key>' or 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    expected = settings.api_key.encode()
    # every key compared (constant time each), none short-circuits: the answer does not say which was wrong
    right = [hmac.compare_digest(key.encode(), expected) for key in given]
    if not all(right):
        raise WrongApiKeyError("wrong API key" if len(given) == 1 else "a key sent is not the right one")


ApiKeyDep = Depends(require_api_key)


def require_feedback_key(request: Request) -> None:
    """POST /feedback: SEARCH_API_KEY, or SEARCH_FEEDBACK_KEY (a key that may send judgments only); the
    settings are the request's own, as in require_api_key."""
    settings: Settings = request.state.settings
    given = given_keys(request)
    if settings.feedback_key is None or not given:
        require_api_key(request)
        return
    keys = [k.encode() for k in (settings.feedback_key, settings.api_key) if k is not None]
    right = [any(hmac.compare_digest(g.encode(), k) for k in keys) for g in given]
    if not all(right):
        raise WrongApiKeyError("wrong key: send SEARCH_FEEDBACK_KEY or SEARCH_API_KEY")


FeedbackKeyDep = Depends(require_feedback_key)
