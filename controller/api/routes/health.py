"""Liveness, readiness and Prometheus metrics; no token needed."""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from controller import __version__
from controller.api.metrics import metrics_response
from controller.api.routes import PublicRouter
from controller.api.schemas.public.ingest import Liveness, Readiness
from controller.services import health

router = PublicRouter(tags=["health"])


@router.get("/healthz", response_model=Liveness, summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:  # on the event loop: never waits for a worker thread
    return {"status": "ok", "version": __version__}


@router.get("/readyz", response_model=Readiness, summary="Readiness: database reachable and migrated to head",
            responses={503: {"model": Readiness, "description": "Not ready: the checks say why."}})
def readyz(request: Request) -> JSONResponse:
    report = health.readiness(request.app.state.runtime)
    return JSONResponse(report, status_code=200 if report["status"] == "ready" else 503)


@router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus text exposition",
            description="c4's gauges, counters and histograms; names, labels and their cardinality are listed "
                        "in deploy/README.md.",
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                             "description": "Prometheus text format 0.0.4"}})
def metrics(request: Request) -> Response:
    return metrics_response(request.app.state.runtime)
