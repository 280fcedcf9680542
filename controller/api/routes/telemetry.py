"""Telemetry ingest (API.md, Telemetry): node agents post collective records in batches."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from controller.api.auth import require
from controller.api.schemas.telemetry import CollectiveBatch
from controller.domain.telemetry import CollectiveRecord, PeerProgress
from controller.services.telemetry import Telemetry

router = APIRouter(prefix="/v1/telemetry", tags=["telemetry"])
AGENT = require("agent")


@router.post("/collectives", dependencies=[Depends(AGENT)], status_code=202,
             summary="Ingest a batch of collective records; one invalid record refuses the batch")
def ingest_collectives(request: Request, batch: CollectiveBatch) -> JSONResponse:
    telemetry: Telemetry = request.app.state.telemetry
    records = [
        CollectiveRecord(
            job=r.job, comm=r.comm, rank=r.rank, nranks=r.nranks, op=r.op, seq=r.seq, bytes=r.bytes,
            t_start_us=r.t_start_us, t_end_us=r.t_end_us, host=batch.host,
            peers=tuple(PeerProgress(p.peer, p.dir, p.bytes, p.t_first_us, p.t_last_us, p.done) for p in r.peers),
        )
        for r in batch.records
    ]
    accepted = telemetry.ingest(batch.host, records)
    return JSONResponse({"accepted": accepted}, status_code=202)
