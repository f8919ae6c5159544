"""The one middleware of our own, pure ASGI: HEAD answered as GET without the body, request metrics, and
the request body size limit (413) on Content-Length and on the bytes actually streamed.

One layer rather than three: each ASGI layer is a coroutine call per request, and the metrics one wrapped
`send` as well (bench/serving/request_profile.py; docs/benchmarks.md's request profile)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import BodyTooLargeError, error_body
from app.metrics import AppMetrics

# bodies are not read on these methods, so the limit is not checked on them
NO_BODY = ("GET", "HEAD", "OPTIONS")


class EdgeMiddleware:
    """HEAD answered wherever GET is (RFC 9110 §9.3.2): the GET route runs, its status and headers
    (Content-Length included) go out, its body does not. FastAPI routes declare GET alone, so without
    this a HEAD is 405; handled once here rather than on every route, so the spec keeps one operation
    per GET.

    Every request is counted by *route template* (not raw path, so /bundles/{version} stays one series),
    as GET for a HEAD, and with collections by the collection it was about (`label_of`,
    app/live/collections.py). Bodies over `max_bytes` are refused (413) before the app (and pydantic)
    ever parse them; such a request is counted as `unmatched`, as the router never saw it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        metrics: AppMetrics,
        label_of: Callable[[Scope, str], str] | None = None,
    ):
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.label_of = label_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        if head:
            scope = {**scope, "method": "GET"}
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        try:
            await self._limited(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            name = self.label_of(scope, template) if self.label_of is not None else ""
            self.metrics.observe_request(
                template, scope["method"], status, time.perf_counter() - started, collection=name
            )

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, unless the body is over the limit: declared (Content-Length) or counted as it streams."""
        if scope["method"] in NO_BODY:
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                too_big = False  # the server rejects a malformed header itself
            if too_big:
                await self._refuse(send, f"request body of {int(declared)} bytes")
                return
            await self.app(scope, receive, send)
            return
        # no Content-Length (chunked upload): read it here, counting, then replay it to the app
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, f"request body of more than {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, what: str) -> None:
        err = BodyTooLargeError(f"{what} exceeds the limit of {self.max_bytes} bytes (SEARCH_MAX_BODY_BYTES)")
        payload = json.dumps(error_body(err.code, err.message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": err.status_code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
