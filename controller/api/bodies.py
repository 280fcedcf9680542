"""How request bodies become values: strict UTF-8 JSON, and for heavy routes, off the event loop
in slices that never hold the interpreter for long.

Every route of a `PublicRouter` is a `C4Route`. Its JSON body is decoded here instead of by
FastAPI: invalid UTF-8 or JSON is a 422 naming `body` (never a 400 nobody documented). A heavy
route's body (`limits.route_gate`) is parsed in a worker thread one element of its big lists at
a time (`parse_sliced`) and each element of a `list[Model]` field is validated on its own, so
the interpreter lock changes hands between elements and `/healthz` answers within
milliseconds while a 100k-host fabric is read. FastAPI then validates the top level, whose
lists already hold validated models (checked by type, not again field by field).

Work on a heavy request stops at its next `checkpoint` once the guard sets its cancel flag
(client gone, shutdown drain over): 503, nothing committed.

The cyclic garbage collector is off while a heavy request runs (`services.collector.paused`): a 100k-host
fabric is millions of objects, and each full collection would scan them all holding the
interpreter lock for a second or more, stalling every other request. Reference counting still
frees what the request drops. Once a new fabric is stored it lives until the next one, so the
collector is told to leave what exists then alone (`gc.freeze`): later full collections do not
rescan it. (A reference cycle alive at that moment is collected only by the collector's periodic
maintenance; fabrics hold none.) Any pause that leaves many objects alive (a maximal telemetry
batch's queued records) ends the same way (`services.collector`).
"""

from __future__ import annotations

import codecs
import functools
import inspect
import json
import re
import threading
import typing
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from prometheus_client import Counter
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.types import Receive, Scope, Send

from controller.api import limits
from controller.api.guard import CANCEL_KEY, guarded
from controller.services import collector
from controller.services.errors import Unavailable

MAX_ELEMENT_ERRORS = 50  # a 422 lists this many element problems at most
CHECK_EVERY = 256  # elements between looks at the cancel flag
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_limiter: list[anyio.CapacityLimiter] = []
# Bodies other than JSON: content type -> decoder(raw body, checkpoint) -> (the JSON document
# FastAPI then validates, the decoded value, left in `request.state.c4_body`). A route takes
# one when its `openapi_extra` lists the type under `requestBody.content`; such a route
# answers 415 to a content type that is neither JSON nor one of those.
BODY_DECODERS: dict[str, Callable[[bytes, Callable[[], None]], tuple[Any, Any]]] = {}
CANCELLED = Counter("c4_http_requests_cancelled_total",
                    "Heavy requests whose work stopped at a checkpoint (client gone or shutdown drain over)",
                    ["route"])


class Cancelled(Unavailable):
    code = "cancelled"

    def __init__(self) -> None:
        super().__init__("the request was cancelled (its client went away or the server is shutting down); "
                         "nothing was changed; retry it", {"retry": True})


def checkpoint(request: Request) -> Callable[[], None]:
    """A function that raises `Cancelled` once the request's work should stop."""
    flag: threading.Event | None = request.scope.get(CANCEL_KEY)
    route = getattr(request.scope.get("route"), "path", "unmatched")

    def check() -> None:
        if flag is not None and flag.is_set():
            CANCELLED.labels(route).inc()
            raise Cancelled

    return check


def _invalid(message: str) -> RequestValidationError:
    return RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": message, "input": None}])


def _text(raw: bytes, slice_bytes: int = 1 << 20) -> str:
    """`raw` decoded as UTF-8, a megabyte per call (a heavy body's decoding never holds the
    interpreter for long)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = []
    start = 0
    try:
        for start in range(0, len(raw), slice_bytes):
            parts.append(decoder.decode(raw[start:start + slice_bytes]))
        parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError:
        raise _invalid(f"the body is not UTF-8: an invalid byte in bytes {start} to {start + slice_bytes}") from None
    return "".join(parts)


def _where(exc: json.JSONDecodeError) -> str:
    return f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"


def parse(raw: bytes) -> Any:
    text = _text(raw)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid(_where(exc)) from None
    except RecursionError:
        raise _invalid("the body is not JSON this server reads: nested too deeply") from None


def _skip(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


def _value(text: str, i: int) -> tuple[Any, int]:
    return _DECODER.raw_decode(text, i)


def parse_sliced(text: str, check: Callable[[], None]) -> Any:
    """`json.loads(text)`, but a top-level object's list values are decoded one element per
    call, so no single call holds the interpreter for more than one element."""
    i = _skip(text, 0)
    if not text.startswith("{", i):
        value, i = _value(text, i)
    else:
        value = {}
        i = _skip(text, i + 1)
        if text.startswith("}", i):
            i += 1
        else:
            while True:
                if not text.startswith('"', i):
                    raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
                key, i = _value(text, i)
                i = _skip(text, i)
                if not text.startswith(":", i):
                    raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
                i = _skip(text, i + 1)
                if text.startswith("[", i):
                    item, i = _list(text, i, check)
                else:
                    item, i = _value(text, i)
                value[key] = item
                i = _skip(text, i)
                if text.startswith(",", i):
                    i = _skip(text, i + 1)
                    continue
                if text.startswith("}", i):
                    i += 1
                    break
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
    i = _skip(text, i)
    if i != len(text):
        raise json.JSONDecodeError("Extra data", text, i)
    return value


def _list(text: str, i: int, check: Callable[[], None]) -> tuple[list[Any], int]:
    items: list[Any] = []
    i = _skip(text, i + 1)
    if text.startswith("]", i):
        return items, i + 1
    while True:
        item, i = _value(text, i)
        items.append(item)
        if len(items) % CHECK_EVERY == 0:
            check()
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
            continue
        if text.startswith("]", i):
            return items, i + 1
        raise json.JSONDecodeError("Expecting ',' delimiter", text, i)


def element_adapters(model: Any) -> dict[str, TypeAdapter[Any]]:
    """For a body model, a validator per field that is a list of models (the big lists)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return {}
    out: dict[str, TypeAdapter[Any]] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if typing.get_origin(annotation) is list:
            (item,) = typing.get_args(annotation)
            if isinstance(item, type) and issubclass(item, BaseModel):
                out[info.alias or name] = TypeAdapter(item)
    return out


def parse_heavy(raw: bytes, adapters: dict[str, TypeAdapter[Any]], check: Callable[[], None]) -> Any:
    """Parse and validate a heavy body element by element (runs in a worker thread)."""
    text = _text(raw)
    del raw
    try:
        doc = parse_sliced(text, check)
    except json.JSONDecodeError as exc:
        raise _invalid(_where(exc)) from None
    except RecursionError:
        raise _invalid("the body is not JSON this server reads: nested too deeply") from None
    if not isinstance(doc, dict):
        return doc
    errors: list[Any] = []
    for key, adapter in adapters.items():
        items = doc.get(key)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            if index % CHECK_EVERY == 0:
                check()
            try:
                items[index] = adapter.validate_python(item)
            except ValidationError as exc:
                errors += [{**e, "loc": ("body", key, index, *e["loc"])} for e in exc.errors(include_url=False)]
                if len(errors) >= MAX_ELEMENT_ERRORS:
                    raise RequestValidationError(errors[:MAX_ELEMENT_ERRORS]) from None
    if errors:
        raise RequestValidationError(errors)
    return doc


def _kind(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _is_json(request: Request) -> bool:
    kind = _kind(request)
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _as_json(request: Request) -> None:
    """Make FastAPI read the (already decoded) body from `request._json`: it does so only for a
    JSON content type."""
    request.scope["headers"] = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"] + [
        (b"content-type", b"application/json")]
    if hasattr(request, "_headers"):
        del request._headers


def _unsupported(kind: str, accepted: list[str]) -> Response:
    return Response(json.dumps({"error": {
        "code": "unsupported_media_type",
        "message": f"this route reads application/json or {', '.join(accepted)}, not {kind}",
        "details": {"accepted": ["application/json", *accepted]}}}).encode(),
        status_code=415, media_type="application/json")


def heavy_limiter() -> anyio.CapacityLimiter:
    if not _limiter:
        _limiter.append(anyio.CapacityLimiter(sum(g.concurrent for g in limits.GATES.values())))
    return _limiter[0]


def _drain(value: Any) -> None:
    """Empty `value`'s big lists one element at a time, so that freeing millions of objects
    happens in slices the interpreter lock passes between, not in one deallocation cascade on
    the event loop when the request ends."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _drain(getattr(value, name, None))
    elif isinstance(value, dict):
        for item in value.values():
            if isinstance(item, list):
                _drain(item)
    elif isinstance(value, list) and len(value) > CHECK_EVERY:
        while value:
            del value[-1]


def _releasing(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """A heavy sync endpoint that, in its worker thread, drains its body model and parsed
    document once it is done with them (see `_drain`)."""

    @functools.wraps(endpoint)
    def run(**values: Any) -> Any:
        try:
            return endpoint(**values)
        finally:
            for value in values.values():
                if isinstance(value, BaseModel):
                    _drain(value)
                elif isinstance(value, Request):
                    _drain(getattr(value, "_json", None))

    run._c4_releasing = True  # type: ignore[attr-defined]
    return run


class C4Route(APIRoute):
    """An `APIRoute` guarded before its body is read (`guard.guarded`: auth, gate, body limit)
    whose JSON body is parsed here (see the module docstring)."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.methods and scope["method"] not in self.methods):
            await super().handle(scope, receive, send)  # 405 and the like: nothing to guard
            return
        await guarded(self, scope, receive, send, super().handle)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        inner = super().get_route_handler()
        if self.body_field is None:
            return inner
        gate = limits.route_gate(self.openapi_extra)
        heavy = gate is not None
        adapters = element_adapters(self.body_field.field_info.annotation) if heavy else {}
        others = sorted(set((self.openapi_extra or {}).get("requestBody", {}).get("content", {}))
                        & BODY_DECODERS.keys())
        call = self.dependant.call
        if heavy and call is not None and not inspect.iscoroutinefunction(call) \
                and not getattr(call, "_c4_releasing", False):
            self.dependant.call = _releasing(call)
            inner = super().get_route_handler()

        async def handler(request: Request) -> Response:
            if not heavy:
                return await parsed(request)
            with collector.paused():
                response = await parsed(request)
                if gate == "fabric" and response.status_code < 300:
                    # Before the collector is back: its first young collection would scan the
                    # whole new fabric (see the module docstring).
                    collector.freeze()
            return response

        async def parsed(request: Request) -> Response:
            if _is_json(request):
                raw = await request.body()
                if raw:
                    if heavy:
                        doc = await anyio.to_thread.run_sync(parse_heavy, raw, adapters, checkpoint(request),
                                                             limiter=heavy_limiter(), abandon_on_cancel=True)
                    else:
                        doc = parse(raw)
                    request._json = doc  # Starlette's cache of `request.json()`, which FastAPI reads
            elif others and request.headers.get("content-type"):
                kind = _kind(request)
                if kind not in others:
                    return _unsupported(kind, others)
                raw = await request.body()
                doc, value = await anyio.to_thread.run_sync(BODY_DECODERS[kind], raw, checkpoint(request),
                                                            limiter=heavy_limiter(), abandon_on_cancel=True)
                request.state.c4_body = value
                request._json = doc
                _as_json(request)
            return await inner(request)

        return handler
