"""HTTP routes of the web console: the page, its static assets and three read endpoints.

- `GET /console/` serves the single page (no data in it, so no token needed); its assets are
  under `/console/static/`, all shipped in the package, with a Content-Security-Policy that
  lets the page load nothing from anywhere else.
- `GET /console/api/session`, `/console/api/fabric` and `/console/api/jobs/{name}/connections`
  need a bearer token of any role, like every `/v1` GET. Every change the console makes goes
  through the `/v1` API with the user's token; these endpoints only read.

The API layer mounts this router and hands it its auth dependency (`router(reader)`), so the
console never imports `controller.api` (see README.md beside this file).
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from controller.console import views
from controller.console.schemas import ConnectionsPublic, FabricStatePublic, SessionPublic
from controller.services.runtime import Runtime

STATIC_DIR = Path(__file__).parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
# What each role may change, per API.md's roles (admin: everything). The page greys out the
# rest; the API refuses it anyway.
MAY = {"admin": ["links", "hosts", "alarms", "jobs"], "scheduler": ["hosts", "alarms", "jobs"],
       "agent": [], "viewer": []}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


def load_assets(root: Path = STATIC_DIR) -> dict[str, Asset]:
    """Every file under `root` by its path relative to it; read once at start-up."""
    assets = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        body = path.read_bytes()
        media = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if path.suffix in (".js", ".mjs"):
            media = "text/javascript"
        etag = '"' + hashlib.sha1(body, usedforsecurity=False).hexdigest()[:20] + '"'
        assets[path.relative_to(root).as_posix()] = Asset(body, media, etag)
    return assets


def _cached(request: Request, body: bytes, media_type: str, etag: str, headers: dict[str, str],
            gzipped: bytes | None = None) -> Response:
    """`body`, or 304 when the client holds this ETag; gzipped when the client takes it."""
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag, **headers})
    out = {"ETag": etag, "Vary": "Accept-Encoding", **headers}
    if gzipped is not None and "gzip" in request.headers.get("accept-encoding", ""):
        return Response(gzipped, media_type=media_type, headers={**out, "Content-Encoding": "gzip"})
    return Response(body, media_type=media_type, headers=out)


def router(reader: Callable[..., str] | Callable[..., Awaitable[str]]) -> APIRouter:
    """The console's routes; `reader` is the API's auth dependency for GETs (returns the role)."""
    assets = load_assets()
    fabric_state = views.FabricState()
    r = APIRouter(tags=["console"])

    # The page and assets are in memory: answered on the event loop, no thread hop.
    async def page(request: Request) -> Response:
        index = assets["index.html"]
        return _cached(request, index.body, "text/html; charset=utf-8", index.etag, PAGE_HEADERS)

    @r.get("/console", include_in_schema=False)
    def console_root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=307)

    r.add_api_route("/console/", page, methods=["GET", "HEAD"], include_in_schema=False)

    @r.api_route("/console/static/{path:path}", methods=["GET", "HEAD"], include_in_schema=False)
    async def static(request: Request, path: str) -> Response:
        asset = assets.get(path)
        if asset is None:
            return Response("not found", status_code=404, media_type="text/plain")
        return _cached(request, asset.body, asset.media_type, asset.etag,
                       {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    @r.get("/console/api/session", response_model=SessionPublic,
           summary="The role of the bearer token and what it may change")
    def session(role: str = Depends(reader)) -> dict[str, Any]:
        return {"role": role, "may": MAY.get(role, [])}

    @r.get("/console/api/fabric", dependencies=[Depends(reader)], response_class=Response,
           responses={200: {"model": FabricStatePublic}, 304: {"description": "Not modified (ETag)"}},
           summary="The fabric map's state: layout, switches, and every link's state and load, in columns")
    def fabric(request: Request) -> Response:
        body = fabric_state.get(_runtime(request))
        return _cached(request, body.raw, "application/json", body.etag, {"Cache-Control": "no-cache"},
                       body.gzipped)

    @r.get("/console/api/jobs/{name}/connections", dependencies=[Depends(reader)],
           response_model=ConnectionsPublic,
           summary="A job's connections with each flow's path (read-only; any role)")
    def job_connections(request: Request, name: str) -> dict[str, Any]:
        return views.connections(_runtime(request), name)

    return r


def _runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt
