"""Probe endpoints: POST /v1/probes (agents report), GET /v1/probes/requests?host= (what to probe)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Query, Request

from controller.api.auth import ANY, require
from controller.api.routes import PublicRouter
from controller.api.schemas.jobs import ProbeReport
from controller.api.schemas.public.ingest import ProbeRequestsPublic, ProbesAccepted
from controller.api.state import runtime_of
from controller.services import probes

router = PublicRouter(prefix="/v1", tags=["probes"])
AGENT = require("agent")


@router.post("/probes", status_code=202, dependencies=[Depends(AGENT)], response_model=ProbesAccepted,
             summary="Report what a path probe saw: per source port, the hop addresses")
def post_probes(request: Request, body: ProbeReport) -> dict[str, Any]:
    return probes.record(runtime_of(request), body.src_address, body.dst_address, body.protocol, body.dst_port,
                         [(r.sport, r.hops) for r in body.results], body.t_us)


@router.get("/probes/requests", dependencies=[Depends(ANY)], response_model=ProbeRequestsPublic,
            summary="(src, dst) address pairs the planner wants probed (probed hashing mode)")
def get_requests(request: Request, host: str | None = Query(None)) -> dict[str, Any]:
    return {"requests": probes.requests(runtime_of(request), host)}
