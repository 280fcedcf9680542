"""Telemetry ingest (API.md, Telemetry): node agents post collective records in batches;
switch agents post raw counters. Also `GET /v1/congestion`, the detector's current output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from controller.api import bodies, limits
from controller.api.auth import ANY, require
from controller.api.routes import PublicRouter
from controller.api.schemas.common import NameFilter, NameInPath
from controller.api.schemas.public.ingest import Accepted, RateMatrixPublic, SwitchPortsPublic
from controller.api.schemas.public.measured import CongestionPublic
from controller.api.schemas.telemetry import (
    MAX_BATCH_FLOWS,
    MAX_BATCH_PEERS,
    CollectiveBatch,
    PackedHeader,
    SwitchBatch,
)
from controller.api.state import runtime_of
from controller.domain import coll_packed
from controller.services import links
from controller.services.switch_telemetry import PortPoll, SwitchPoll, SwitchTelemetry
from controller.services.telemetry import Telemetry

router = PublicRouter(prefix="/v1/telemetry", tags=["telemetry"])
congestion_router = PublicRouter(prefix="/v1", tags=["telemetry"])
AGENT = require("agent")


PACKED_DOC = (f"Also accepts `Content-Type: {coll_packed.CONTENT_TYPE}` (an extension to API.md, "
              "docs/telemetry-packed.md): a JSON header of record shapes, then per record a shape index and "
              "the shim's COLL message; it decodes to exactly the records of the JSON form and is validated "
              "the same way (a 422 names the field; nothing of a refused batch is kept). Another content "
              "type is a 415.")


def decode_collectives(raw: bytes, check: Callable[[], None]) -> tuple[dict[str, Any], list[coll_packed.Record]]:
    """A packed batch: (the JSON document FastAPI validates: its host, no records; the records)."""
    try:
        header, start = coll_packed.decode_header(raw)
    except coll_packed.PackedError as exc:
        raise _invalid(exc) from None
    try:
        head = PackedHeader.model_validate(header)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", "header", *e["loc"])}
                                      for e in exc.errors(include_url=False)][:bodies.MAX_ELEMENT_ERRORS]) from None
    shapes = [coll_packed.Shape(s.job, s.comm, s.rank, s.nranks, s.op, tuple(
        coll_packed.ShapePeer(p.peer, p.dir, p.done, p.net, tuple(
            coll_packed.Flow(f.sport, f.bytes, f.t_last_us, f.net_us) for f in p.flows)) for p in s.peers),
        s.truncated) for s in head.shapes]
    check()
    try:
        records = coll_packed.records(raw, start, shapes)
    except coll_packed.PackedError as exc:
        raise _invalid(exc) from None
    peers = sum(len(r.peers) for r in records)
    if peers > MAX_BATCH_PEERS:
        raise _invalid(coll_packed.PackedError(
            ("records",), f"the batch holds {peers} peer entries; at most {MAX_BATCH_PEERS} per batch"))
    flows = sum(len(p.flows) for r in records for p in r.peers)
    if flows > MAX_BATCH_FLOWS:
        raise _invalid(coll_packed.PackedError(
            ("records",), f"the batch holds {flows} flow entries; at most {MAX_BATCH_FLOWS} per batch"))
    return {"host": head.host, "records": []}, records


def _invalid(exc: coll_packed.PackedError) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": ("body", *exc.loc), "msg": exc.msg,
                                    "input": None}])


bodies.BODY_DECODERS[coll_packed.CONTENT_TYPE] = decode_collectives


@router.post("/collectives", dependencies=[Depends(AGENT)], status_code=202, response_model=Accepted,
             summary="Ingest a batch of collective records (empty: a heartbeat); one invalid record refuses the batch",
             description=PACKED_DOC,
             openapi_extra={**limits.body(coll_packed.MAX_BODY_BYTES, gate="ingest"), "requestBody": {"content": {
                 coll_packed.CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}}}})
def ingest_collectives(request: Request, batch: CollectiveBatch) -> dict[str, int]:
    telemetry: Telemetry = request.app.state.telemetry
    packed: list[coll_packed.Record] | None = getattr(request.state, "c4_body", None)
    records = batch.records if packed is None else packed
    accepted = telemetry.ingest(batch.host, records)  # (domain records where the detectors need them)
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
