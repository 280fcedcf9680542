"""What a request to a c4 route meets before its body is read: auth, admission and the
body-size limit, in that order (`guarded`, called by `bodies.C4Route.handle` once the router has
picked the route), and the global cap on every body (`BodyCap`, the outermost middleware).

1. If the route requires a role (an `auth.Requirement` among its dependencies), the bearer
   token is checked now: 401 or 403 without reading the body, and the connection is closed
   after the answer so an unread upload costs nothing.
2. A heavy route (`limits.route_gate`) must enter its gate: 429 with `Retry-After` when full.
3. The body is read as it streams in, up to the route's limit (`limits.route_limit`): a larger
   declared `Content-Length` is refused at once, a chunked body as soon as it passes the limit
   (413 naming the limit). The app then gets the body as one message.
4. For a heavy route the request carries a cancel flag (`CANCEL_KEY`): set when the client
   goes away or the server's graceful drain gives up on it, so work off the event loop stops at
   its next checkpoint and commits nothing (`bodies.checkpoint`).

Routes without a `Requirement` (health, metrics, docs) skip step 1; FastAPI's own dependency
still runs after this, so a route is never less guarded than its declaration says. A route
that is not a `C4Route` (mounted assets, a router of plain `APIRouter`s) gets only `BodyCap`.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controller.api import limits
from controller.api.auth import Requirement, TokenCache, bearer_of

CANCEL_KEY = "c4.cancel"
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class _Policy:
    """What a route declared (the same route object serves every app, so no setting here)."""

    __slots__ = ("extra", "gate", "requirement")

    def __init__(self, requirement: Requirement | None, extra: dict[str, Any] | None) -> None:
        self.requirement, self.extra, self.gate = requirement, extra, limits.route_gate(extra)


def _policy(route: Any) -> _Policy:
    policy: _Policy | None = getattr(route, "_c4_policy", None)
    if policy is None:
        dependant = getattr(route, "dependant", None)
        found = [d.call for d in (dependant.dependencies if dependant else ()) if isinstance(d.call, Requirement)]
        policy = _Policy(found[0] if found else None, getattr(route, "openapi_extra", None))
        route._c4_policy = policy
    return policy


async def guarded(route: Any, scope: Scope, receive: Receive, send: Send, inner: ASGIApp) -> None:
    """Steps 1 to 4 of the module docstring for one request to `route`, then `inner`."""
    app = scope["app"]
    policy = _policy(route)
    limit = limits.route_limit(policy.extra, app.state.runtime.settings.max_body_bytes)
    headers = dict(scope.get("headers") or [])
    if policy.requirement is not None:
        refusal = await _authorize(scope, headers, policy.requirement)
        if refusal is not None:
            status, body, extra = refusal
            await _answer(send, status, body, close=True, extra=extra)
            return
    declared = _declared_length(headers)
    if declared is not None and declared > limit:
        await _answer(send, 413, limits.too_large_body(limit), close=True)
        return
    gates: dict[str, limits.Gate] = app.state.gates
    gate = gates.get(policy.gate) if policy.gate else None
    held = min(declared if declared is not None else limit, limit)
    if gate is not None and not gate.try_enter(held):
        retry = gate.spec.retry_after_s
        await _answer(send, 429, _error("too_many_requests",
                                        f"too many {gate.name} requests in progress; retry in {retry} s",
                                        {"retry_after_s": retry}),
                      close=True, extra=[(b"retry-after", str(retry).encode())])
        return
    if gate is None:
        await _pass(scope, receive, send, limit, False, inner)
        return
    left = False

    def leave() -> None:
        nonlocal left
        if not left:
            left = True
            gate.leave(held)

    async def send_then_free(message: Message) -> None:
        # The gate is free before the answer's last bytes go out: a client that sends its
        # next heavy request as soon as it has the answer must not find the gate still held.
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            leave()
        await send(message)

    try:
        await _pass(scope, receive, send_then_free, limit, True, inner)
    finally:
        leave()


async def _authorize(scope: Scope, headers: dict[bytes, bytes],
                     requirement: Requirement) -> tuple[int, bytes, list[tuple[bytes, bytes]]] | None:
    app = scope["app"]
    token = bearer_of(headers.get(b"authorization", b"").decode("latin-1"))
    challenge = [(b"www-authenticate", b"Bearer")]
    if token is None:
        return 401, _error("unauthorized", "missing bearer token"), challenge
    cache: TokenCache = app.state.token_cache
    known, role = cache.cached(app.state.runtime, token)
    if not known:
        role = await run_in_threadpool(cache.role, app.state.runtime, token)
    if role is None:
        return 401, _error("unauthorized", "invalid or revoked token"), challenge
    method = scope["method"]
    if not requirement.admits(role, method):
        refusal = requirement.refusal(role, method, scope.get("path", ""))
        return 403, _error(refusal.code, refusal.message), []
    return None


async def _pass(scope: Scope, receive: Receive, send: Send, limit: int, heavy: bool, inner: ASGIApp) -> None:
    if scope["method"] not in BODY_METHODS:
        await inner(scope, receive, send)
        return
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left before its body arrived
            return
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            await _answer(send, 413, limits.too_large_body(limit), close=True)
            return
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    chunks.clear()
    if not heavy:
        await inner(scope, _replay(body, receive), send)
        return
    cancel = threading.Event()
    scope[CANCEL_KEY] = cancel
    gone = anyio.Event()

    async def watch() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                cancel.set()
                gone.set()
                return

    async def receive_after_body() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch)
            await inner(scope, _replay(body, receive_after_body), send)
            tasks.cancel_scope.cancel()
    except BaseException:
        cancel.set()  # cancelled (a drain that gave up) or failed: the work must stop
        raise


class BodyCap:
    """Outermost: no request body, on any route, may pass `C4_MAX_BODY_BYTES`. A declared
    larger `Content-Length` is a 413 at once; a chunked body is counted as the route reads it
    (nothing is buffered here) and cut off with a 413 when it passes the cap. Routes of a
    `PublicRouter` then apply their own, lower limit after auth (`guarded`)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(dict(scope.get("headers") or []))
        if declared is not None and declared > self.max_bytes:
            await _answer(send, 413, limits.too_large_body(self.max_bytes), close=True)
            return
        seen = 0
        refused = False
        started = False

        async def counting_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    if not started:
                        await _answer(send, 413, limits.too_large_body(self.max_bytes), close=True)
                    return {"type": "http.disconnect"}  # the app stops reading; its answer is dropped
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = True
            await send(message)

        await self.app(scope, counting_receive, guarded_send)


def _declared_length(headers: dict[bytes, bytes]) -> int | None:
    value = headers.get(b"content-length")
    if value is None:
        return None
    return int(value) if value.isdigit() else None


def _replay(body: bytes, then: Receive) -> Receive:
    """A `receive` that hands the app the whole body once, then defers to `then`."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return receive


def _error(code: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "details": details or {}}}).encode()


async def _answer(send: Send, status: int, body: bytes, close: bool = False,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *(extra or [])]
    if close:  # the body may be unread: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
