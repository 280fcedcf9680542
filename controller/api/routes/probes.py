"""Probe endpoints: POST /v1/probes (agents report), GET /v1/probes/requests?host= (what to probe)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from controller.api import limits
from controller.api.auth import require
from controller.api.routes import PublicRouter
from controller.api.schemas.common import HostFilter
from controller.api.schemas.jobs import ProbeReport
from controller.api.schemas.public.ingest import ProbeRequestsPublic, ProbesAccepted
from controller.api.state import runtime_of
from controller.services import probes

router = PublicRouter(prefix="/v1", tags=["probes"])
AGENT = require("agent")
AGENT_ONLY = require("agent", any_role_may_read=False)  # API.md: GET /v1/probes/requests (agent)


@router.post("/probes", status_code=202, dependencies=[Depends(AGENT)], response_model=ProbesAccepted,
             summary="Report what a path probe saw: per source port, the hop addresses",
             openapi_extra=limits.body(1 << 20))
def post_probes(request: Request, body: ProbeReport) -> dict[str, Any]:
    return probes.record(runtime_of(request), body.src_address, body.dst_address, body.protocol, body.dst_port,
                         [(r.sport, r.hops) for r in body.results], body.t_us)


@router.get("/probes/requests", dependencies=[Depends(AGENT_ONLY)], response_model=ProbeRequestsPublic,
            summary="(src, dst) address pairs the planner wants probed (probed hashing mode)")
def get_requests(request: Request, host: HostFilter = None) -> dict[str, Any]:
    return {"requests": probes.requests(runtime_of(request), host)}
