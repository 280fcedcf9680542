"""The one place that maps refusals to HTTP statuses and API.md's error body.

Body: `{"error": {"code": ..., "message": ..., "details": {...}}}`; validation errors
(422) list every offending field path in `details.errors[].field`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.domain.problems import Problem
from controller.services.errors import Conflict, Invalid, NotFound, ServiceError, Unavailable

log = logging.getLogger(__name__)

STATUS: dict[type[ServiceError], int] = {NotFound: 404, Conflict: 409, Invalid: 422, Unavailable: 503}
RETRY_AFTER = {"Retry-After": "1"}  # on every 503: the condition is expected to pass


class ApiError(Exception):
    """A refusal decided in the API layer itself (auth, bad query)."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details, self.headers = status, code, message, details or {}, headers


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def validation_problems(errors: Sequence[Any], body_prefix: bool = True) -> list[Problem]:
    """pydantic's errors as `Problem`s with the document's field paths (the request body's,
    or a file's when `body_prefix` is False): what a 422 and `c4 plan` both report."""
    out = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        if body_prefix and loc and loc[0] == "body":
            loc = loc[1:]
        # Union members add their tag to the path; drop it so the path is the document's.
        loc = tuple(part for part in loc if not (isinstance(part, str) and part in ("leaf-spine", "clos3")))
        if err.get("type") in ("union_tag_invalid", "union_tag_not_found"):
            loc = (*loc, str(err.get("ctx", {}).get("discriminator", "")).strip("'\""))
        msg = str(err.get("msg", "invalid"))
        out.append(Problem(loc or ("body",), msg.removeprefix("Value error, ")))
    return out


def allowed_methods(request: Request) -> list[str]:
    """The methods the OpenAPI declares for this path: those of every documented route with
    the template of the first documented route (in routing order) that matches the path. (A
    `{name:path}` template also matches longer paths, e.g. `/v1/links/x/series` matches
    `/v1/links/{name:path}`; the first match is the more specific one, as in routing.)"""
    path = request.scope.get("path", "")
    routes = [route for router in getattr(request.app.state, "routers", ()) for route in router.routes
              if getattr(route, "include_in_schema", True) and getattr(route, "path_regex", None) is not None]
    first = next((route for route in routes if route.path_regex.match(path)), None)
    if first is None:
        return []
    methods: set[str] = set()
    for route in routes:
        if route.path == first.path:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods - {"HEAD"})


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = validation_problems(exc.errors())
        inv = Invalid(problems)
        return error_response(422, inv.code, inv.message, inv.details)

    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        status = next((s for cls, s in STATUS.items() if isinstance(exc, cls)), 400)
        return error_response(status, exc.code, exc.message, exc.details, RETRY_AFTER if status == 503 else None)

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(exc.status_code,
                                                                                          "http_error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette names one route's methods; the path may have several
            headers["Allow"] = ", ".join(allowed_methods(request))
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)

    @app.exception_handler(DBAPIError)
    async def _database(_: Request, exc: DBAPIError) -> JSONResponse:
        # Classified by exception type (PEP 249), never by message text.
        if isinstance(exc, IntegrityError):
            return error_response(409, "conflict", "the request conflicts with a concurrent change; retry it")
        if isinstance(exc, DataError):  # the schemas bound every field; this is the last line of defence
            log.warning("a value the database refused reached it: %s", type(exc.orig).__name__)
            return error_response(422, "validation_error", "body: a value does not fit what the database stores",
                                  {"errors": [{"field": "body", "loc": ["body"],
                                               "message": "a value does not fit what the database stores"}]})
        if exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError):
            return error_response(503, "database_unavailable", "the database is unavailable or busy; retry later",
                                  headers=RETRY_AFTER)
        log.exception("database error")
        return error_response(500, "internal_error", "internal database error")

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal_error", f"internal error: {type(exc).__name__}")
