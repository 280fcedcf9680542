"""The agent's own HTTP endpoints: ``/healthz`` (liveness and state), ``/readyz`` (200 once
the agent follows the controller and its socket is open, 503 otherwise) and ``/metrics``
(Prometheus text). Served by uvicorn on the agent's event loop, never on the lookup path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


def app(state: Callable[[], dict[str, Any]], registry: CollectorRegistry,
        refresh: Callable[[], None]) -> Starlette:
    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse(state())

    async def readyz(_: Request) -> JSONResponse:
        s = state()
        return JSONResponse(s, status_code=200 if s["ready"] else 503)

    async def metrics(_: Request) -> Response:
        refresh()
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz),
                             Route("/metrics", metrics)])
