"""Request body size limit (413), checked on Content-Length and on the bytes actually streamed; HEAD
answered as GET without the body."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import BodyTooLargeError, error_body


class BodyLimitMiddleware:
    """Refuse bodies over `max_bytes` before the app (and pydantic) ever parse them."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
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


class HeadAsGetMiddleware:
    """HEAD answered wherever GET is (RFC 9110 §9.3.2): the GET route runs, its status and headers
    (Content-Length included) go out, its body does not. FastAPI routes declare GET alone, so without
    this a HEAD is 405; handled once here rather than on every route, so the spec keeps one operation
    per GET."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, without_body)
