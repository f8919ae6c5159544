"""POST /search, the hot route, answered by one pure-ASGI layer instead of FastAPI's request machinery.

What it skips is FastAPI's and Starlette's per-request work around the endpoint: the two layers inside
ours (exception handling, exit stack), routing over every route, dependency solving and the
request/response objects. The endpoint itself is the same function (app/api/routes/search.py's
`search`), with the same arguments, so limits, errors and the answer are computed exactly as before.
Measured on the demo bundle, before and after alternated: the event loop's CPU per request at 32 clients
0.48-0.56 -> 0.27-0.30 ms (bench/serving/thread_cpu.py, bench/results/thread_cpu_fast_path_demo.txt); the
server's CPU per request at 1 client 6.17 -> 5.80 and 5.65 -> 5.15 ms (bench/serving/request_ab.py,
bench/results/request_profile_demo.txt).

Only the plain case takes this path: `POST /search` (no root path), `Content-Type: application/json`, a
body that parses and validates. Everything else (another content type, malformed JSON, a field out of
range, HEAD, the /collections/{c}/search copy) goes on to FastAPI with the body replayed, so every error
answer is FastAPI's and ours exactly as before. An error the endpoint raises is answered by the app's own
exception handler for it (`app.exception_handlers`, looked up by class as Starlette's
ExceptionMiddleware does); one without a handler propagates to the server-error layer as before.

It sits inside EdgeMiddleware (app/api/middleware.py), so the body limit, HEAD and the request metrics
apply unchanged: it puts the /search route in the scope, which is what the metrics label by.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.routes import search as routes
from app.api.routes.search import search
from app.schemas.search import SearchRequest, SearchResponse

PATH = "/search"
JSON = b"application/json"
Handler = Callable[[Request, Any], Response | Awaitable[Response]]


class SearchFastPath:
    """The layer; `owner` is the FastAPI app, for its exception handlers."""

    def __init__(self, app: ASGIApp, *, owner: FastAPI) -> None:
        self.app = app
        self.owner = owner
        # the route FastAPI would have matched (the metrics label by its template)
        self.route = next(r for r in routes.router.routes if isinstance(r, APIRoute) and r.path == PATH)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _plain_search(scope):
            await self.app(scope, receive, send)
            return
        messages = await _read_body(receive)
        request = _parse(messages)
        if request is None:  # FastAPI answers it, with the same error as ever
            await self.app(scope, _replay(messages, receive), send)
            return
        scope["route"], scope["endpoint"] = self.route, search  # what routing would have set
        state = scope["state"]
        try:
            answer = await search(
                request, state["hot_swap"], state["runner"], state["settings"], state.get("collection")
            )
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            answered = handler(Request(scope, receive), exc)
            response = await answered if inspect.isawaitable(answered) else answered
        else:
            # FastAPI's own serialisation of a response model (by alias, None fields left out), as bytes
            content = SearchResponse.__pydantic_serializer__.to_json(answer, by_alias=True, exclude_none=True)
            response = Response(content=content, media_type="application/json")
        await response(scope, receive, send)

    def _handler(self, exc: Exception) -> Handler | None:
        """The app's handler for `exc`, most specific class first; `Exception` itself is left to the
        server-error layer, which is where FastAPI installs it."""
        handlers: dict[Any, Handler] = self.owner.exception_handlers
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None
            if cls in handlers:
                return handlers[cls]
        return None


def _plain_search(scope: Scope) -> bool:
    if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
        return False
    if scope.get("root_path") or "hot_swap" not in scope.get("state", {}):  # no lifespan state: FastAPI's way
        return False
    types = [v for k, v in scope["headers"] if k == b"content-type"]
    return types == [JSON]


async def _read_body(receive: Receive) -> list[Message]:
    """Every message up to the body's last (or the client's disconnect), kept to be replayed as they came."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return messages


def _body(messages: list[Message]) -> bytes:
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")


def _parse(messages: list[Message]) -> SearchRequest | None:
    """The body as FastAPI reads it (json.loads, then the model in Python mode), or None: not a whole
    body, or one that fails in any way (FastAPI then meets the same failure and answers it as it does)."""
    if messages[-1]["type"] != "http.request":
        return None
    body = _body(messages)
    if not body:
        return None
    try:
        return SearchRequest.model_validate(json.loads(body))
    except Exception:
        return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay
