"""Request body size limit: a body over `C4_MAX_BODY_BYTES` is refused with 413 and API.md's
error body before any of it is parsed; nothing changes.

A declared `Content-Length` over the limit is refused at once (the server enforces the
declared length). A body without one (chunked) is read here up to the limit first and then
handed on, so the same rule holds; handlers read bodies whole anyway.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _body(limit: int) -> bytes:
    return json.dumps({"error": {"code": "payload_too_large",
                                 "message": f"the request body is larger than {limit} bytes (C4_MAX_BODY_BYTES)",
                                 "details": {"max_body_bytes": limit}}}).encode()


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        if b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}],
                                      receive), send)

    async def _refuse(self, send: Send) -> None:
        body = _body(self.max_bytes)
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A `receive` that returns `messages` first, then defers to `then` (disconnects)."""
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
