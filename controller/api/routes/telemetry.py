"""Telemetry ingest (API.md, Telemetry): node agents post collective records in batches;
switch agents post raw counters. Also `GET /v1/congestion`, the detector's current output."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Depends, Query, Request

from controller.api import limits
from controller.api.auth import ANY, require
from controller.api.routes import PublicRouter
from controller.api.schemas.common import NameFilter, NameInPath
from controller.api.schemas.public.ingest import Accepted, RateMatrixPublic, SwitchPortsPublic
from controller.api.schemas.public.measured import CongestionPublic
from controller.api.schemas.telemetry import CollectiveBatch, SwitchBatch
from controller.api.state import runtime_of
from controller.services import links
from controller.services.switch_telemetry import PortPoll, SwitchPoll, SwitchTelemetry
from controller.services.telemetry import Telemetry

router = PublicRouter(prefix="/v1/telemetry", tags=["telemetry"])
congestion_router = PublicRouter(prefix="/v1", tags=["telemetry"])
AGENT = require("agent")


@router.post("/collectives", dependencies=[Depends(AGENT)], status_code=202, response_model=Accepted,
             summary="Ingest a batch of collective records (empty: a heartbeat); one invalid record refuses the batch",
             openapi_extra=limits.body(4 << 20, gate="ingest"))
def ingest_collectives(request: Request, batch: CollectiveBatch) -> dict[str, int]:
    telemetry: Telemetry = request.app.state.telemetry
    accepted = telemetry.ingest(batch.host, batch.records)  # (domain records where the detectors need them)
    return {"accepted": accepted}


@router.post("/switches", dependencies=[Depends(AGENT)], status_code=202, response_model=Accepted,
             summary="Ingest raw switch counters (one poll of one switch per sample); rates are derived",
             description="`unknown=refuse` (default): a sample naming a switch or port that no fabric link "
                         "uses refuses the whole batch (422). `unknown=ignore`: those samples or ports are "
                         "left out and listed in `ignored` (`[{field, message}]`); the rest is kept (what "
                         "switch agents use, since a switch has ports the fabric does not model).",
             openapi_extra=limits.body(4 << 20, gate="ingest"))
def ingest_switches(request: Request, batch: SwitchBatch,
                    unknown: Literal["refuse", "ignore"] = Query("refuse")) -> dict[str, Any]:
    switches: SwitchTelemetry = request.app.state.switch_telemetry
    polls = [SwitchPoll(s.switch, s.t_us, [PortPoll(p.port, p.flat(), p.oper_status) for p in s.ports], s.counter_epoch)
             for s in batch.samples]
    result = switches.ingest(polls, unknown)
    body: dict[str, Any] = {"accepted": result.accepted}
    if unknown == "ignore":
        body["ignored"] = [{"field": p.field, "message": p.message} for p in result.ignored]
    return body


@router.get("/switches", dependencies=[Depends(ANY)], response_model=SwitchPortsPublic,
            summary="Latest counters and per-second rates per switch port (any process: they are stored)")
def latest_switches(request: Request, switch: NameFilter = None) -> dict[str, Any]:
    switches: SwitchTelemetry = request.app.state.switch_telemetry
    return {"ports": switches.ports(switch)}


@congestion_router.get("/congestion", dependencies=[Depends(ANY)], response_model=CongestionPublic,
                       summary="Congested link directions now, with their measured and planned load",
                       description="The congestion detector's output (EWMA, enter/leave thresholds, persistence; "
                                   "see README, Decisions): each congested link direction with fresh samples, "
                                   "since when, why, its smoothed measured load and the part of it the planned "
                                   "flows do not explain (`background_gbps`). Most utilized first.")
def get_congestion(request: Request) -> dict[str, Any]:
    return {"congested": links.congestion(runtime_of(request))}


@router.get("/jobs/{job}/rate-matrix", dependencies=[Depends(ANY)], response_model=RateMatrixPublic,
            summary="The job's rate matrices: per communicator, each connection's median share of its "
                    "peers' rate (bytes over time on the network where reported); served by the leader, or on "
                    "PostgreSQL by the replica owning the job's telemetry shard (others: 503 naming it)")
def rate_matrix(request: Request, job: NameInPath) -> dict[str, Any]:
    telemetry: Telemetry = request.app.state.telemetry
    return telemetry.rate_matrix(job)
