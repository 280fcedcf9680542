"""Telemetry ingest (API.md, Telemetry): node agents post collective records in batches."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from controller.api.auth import ANY, require
from controller.api.schemas.telemetry import CollectiveBatch, SwitchBatch
from controller.domain.telemetry import CollectiveRecord, FlowProgress, PeerProgress
from controller.services.switch_telemetry import PortPoll, SwitchPoll, SwitchTelemetry
from controller.services.telemetry import Telemetry

router = APIRouter(prefix="/v1/telemetry", tags=["telemetry"])
AGENT = require("agent")


@router.post("/collectives", dependencies=[Depends(AGENT)], status_code=202,
             summary="Ingest a batch of collective records (empty: a heartbeat); one invalid record refuses the batch")
def ingest_collectives(request: Request, batch: CollectiveBatch) -> JSONResponse:
    telemetry: Telemetry = request.app.state.telemetry
    records = [
        CollectiveRecord(
            job=r.job, comm=r.comm, rank=r.rank, nranks=r.nranks, op=r.op, seq=r.seq, bytes=r.bytes,
            t_start_us=r.t_start_us, t_end_us=r.t_end_us, host=batch.host,
            peers=tuple(PeerProgress(p.peer, p.dir, p.bytes, p.t_first_us, p.t_last_us, p.done,
                                     tuple(FlowProgress(f.sport, f.bytes, f.t_last_us, f.net_us)
                                           for f in p.flows), p.net_us)
                        for p in r.peers),
        )
        for r in batch.records
    ]
    accepted = telemetry.ingest(batch.host, records)
    return JSONResponse({"accepted": accepted}, status_code=202)


@router.post("/switches", dependencies=[Depends(AGENT)], status_code=202,
             summary="Ingest raw switch counters (one poll of one switch per sample); rates are derived")
def ingest_switches(request: Request, batch: SwitchBatch) -> JSONResponse:
    switches: SwitchTelemetry = request.app.state.switch_telemetry
    polls = [SwitchPoll(s.switch, s.t_us, [PortPoll(p.port, p.flat()) for p in s.ports]) for s in batch.samples]
    return JSONResponse({"accepted": switches.ingest(polls)}, status_code=202)


@router.get("/switches", dependencies=[Depends(ANY)],
            summary="Latest counters and per-second rates per switch port seen by this process")
def latest_switches(request: Request, switch: str | None = None) -> dict[str, Any]:
    switches: SwitchTelemetry = request.app.state.switch_telemetry
    return {"ports": switches.ports(switch)}


@router.get("/jobs/{job}/rate-matrix", dependencies=[Depends(ANY)],
            summary="The job's rate matrices: per communicator, each connection's median share of its "
                    "peers' rate (bytes over time on the network where reported); served by the leader")
def rate_matrix(request: Request, job: str) -> dict[str, Any]:
    telemetry: Telemetry = request.app.state.telemetry
    return telemetry.rate_matrix(job)
