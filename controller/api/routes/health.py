"""Liveness, readiness and Prometheus metrics; no token needed."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from controller import __version__
from controller.api.metrics import metrics_response
from controller.services import health

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok", "version": __version__}


@router.get("/readyz", summary="Readiness: database reachable and migrated to head")
def readyz(request: Request) -> JSONResponse:
    report = health.readiness(request.app.state.runtime)
    return JSONResponse(report, status_code=200 if report["status"] == "ready" else 503)


@router.get("/metrics", summary="Prometheus text exposition")
def metrics(request: Request) -> Response:
    return metrics_response(request.app.state.runtime)
