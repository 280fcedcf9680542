"""The API's own documentation: `/docs` (Swagger UI), `/redoc`, and what `/openapi.json` says
about auth and errors; `GET /` leads a browser to the console, or to `/docs` without one.

- Offline: the Swagger UI and ReDoc assets ship in the package (`api/static/docs/`, refreshed by
  `scripts/fetch-docs-assets.sh`; licences beside them) and are served from `/docs/assets`.
  The pages also send a Content-Security-Policy that allows only this origin (and inline and
  `blob:` code the two viewers need), so they never reach a CDN, even for a logo.
- Errors: every `/v1` operation documents API.md's error body for the statuses it can answer
  with: 401 and 503 always; 403 when some role is refused; 404 with a path parameter; 409 on
  writes (state conflicts, concurrent changes); 413 with a body; 422 with parameters or a body;
  429 on heavy routes (`api.limits` gates).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.staticfiles import StaticFiles

from controller.api import limits
from controller.api.auth import Requirement
from controller.api.schemas.public.base import ERROR_DESCRIPTIONS, ErrorBody

ASSETS = Path(__file__).parent / "static" / "docs"
ASSETS_URL = "/docs/assets"
CONSOLE_PATH = "/console"
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'")
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _statuses(route: APIRoute) -> list[int]:
    """The error statuses `route` can answer with (see the module docstring)."""
    out = {401, 503}
    methods = route.methods or set()
    requirements = [d.call for d in route.dependant.dependencies if isinstance(d.call, Requirement)]
    if any(r.may_refuse(m) for r in requirements for m in methods):
        out.add(403)
    if route.dependant.path_params:
        out.add(404)
    if methods & set(WRITES):
        out.add(409)
    if route.body_field is not None:
        out.update((413, 422))
    if route.dependant.query_params or route.dependant.path_params:
        out.add(422)
    if limits.route_gate(route.openapi_extra):
        out.add(429)
    return sorted(out)


def document_errors(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Make `/openapi.json` document, on every `/v1` (and console API) operation of `routers`,
    API.md's error body for each status it can answer with, in place of FastAPI's own 422
    schema (c4 answers validation errors with the same body as every other refusal)."""
    statuses = {(route.path_format, method.lower()): _statuses(route)
                for router in routers for route in router.routes
                if isinstance(route, APIRoute) and route.path_format.startswith(("/v1/", "/console/api/"))
                for method in route.methods or ()}
    generate = app.openapi
    patched: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        schema = generate()
        if patched and patched[0] is schema:
            return schema
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(body.pop("$defs", {}))
        components["ErrorBody"] = body
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                for status in statuses.get((path, method), ()):
                    responses[str(status)] = {
                        "description": ERROR_DESCRIPTIONS[status],
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
                operation["responses"] = dict(sorted(responses.items()))
        used = json.dumps(schema.get("paths", {}))
        for name in ("HTTPValidationError", "ValidationError"):
            if f"#/components/schemas/{name}" not in used:
                components.pop(name, None)
        patched[:] = [schema]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _csp(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    return response


def install(app: FastAPI) -> None:
    """Serve `/docs`, `/redoc`, their assets, and the `GET /` redirect."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> Response:
        return _csp(get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} — API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True, "validatorUrl": None, "tryItOutEnabled": True,
                                   "displayRequestDuration": True}))

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> Response:
        return _csp(get_redoc_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} — API",
                                   redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                                   redoc_favicon_url=f"{ASSETS_URL}/favicon-32x32.png", with_google_fonts=False))

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> RedirectResponse:
        """To the web console when this build has one, else to the API docs."""
        return RedirectResponse(CONSOLE_PATH if has_console(request.app) else "/docs", status_code=307)


def has_console(app: FastAPI) -> bool:
    """Whether some route answers `GET /console` (a route, an included router or a mount)."""
    for path in (CONSOLE_PATH, CONSOLE_PATH + "/"):
        scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": [],
                 "query_string": b""}
        if any(route.matches(scope)[0] != Match.NONE for route in app.router.routes):
            return True
    return False
