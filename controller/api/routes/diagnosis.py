"""Hosts, alarms, webhooks and job pauses (API.md, Diagnosis)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Body, Depends, Path, Query, Request, Response

from controller.api.auth import ANY, require
from controller.api.routes import PublicRouter
from controller.api.schemas.common import NameFilter, NameInPath, RowIdInPath
from controller.api.schemas.diagnosis import EmptyBody, IsolateRequest, PauseCreate, WebhookCreate
from controller.api.schemas.public.diagnosis import (
    AlarmPublic,
    AlarmsPublic,
    DeliveriesPublic,
    HostPublic,
    HostsPublic,
    PausePublic,
    PausesPublic,
    WebhookPublic,
    WebhooksPublic,
)
from controller.api.state import runtime_of
from controller.domain.alarms import AlarmKind, AlarmState
from controller.services import alarms, hosts, pauses, webhooks

router = PublicRouter(prefix="/v1", tags=["diagnosis"])
SCHEDULER = require("scheduler")
JOB_SIDE = require("scheduler", "agent")  # the scheduler, or the training loop via its agent token
AlarmId = Annotated[str, Path(min_length=1, max_length=32, description="The alarm's id, e.g. `a-000017`.")]


@router.get("/hosts", dependencies=[Depends(ANY)], response_model=HostsPublic,
            summary="Hosts, their state and their agent's telemetry (reporting, gap, unknown), sorted by name")
def list_hosts(request: Request, state: Literal["active", "isolated"] | None = None,
               telemetry: Literal["reporting", "gap", "unknown"] | None = None) -> dict[str, Any]:
    return {"hosts": hosts.list_hosts(runtime_of(request), state, telemetry)}


@router.post("/hosts/{name}/isolate", dependencies=[Depends(SCHEDULER)], response_model=HostPublic,
             summary="Take a host out of use; jobs using it are flagged (idempotent)")
def isolate_host(request: Request, name: NameInPath, body: IsolateRequest) -> dict[str, Any]:
    return hosts.isolate(runtime_of(request), name, body.reason)


@router.post("/hosts/{name}/release", dependencies=[Depends(SCHEDULER)], response_model=HostPublic,
             summary="Put a host back in use (idempotent)")
def release_host(request: Request, name: NameInPath, body: EmptyBody | None = None) -> dict[str, Any]:
    return hosts.release(runtime_of(request), name)


@router.get("/alarms", dependencies=[Depends(ANY)], response_model=AlarmsPublic, summary="Alarms, newest first")
def list_alarms(request: Request, job: NameFilter = None, state: AlarmState | None = None,
                kind: AlarmKind | None = None, limit: int = Query(500, ge=1, le=5000)) -> dict[str, Any]:
    return {"alarms": alarms.list_alarms(runtime_of(request), job, state, kind, limit)}


@router.get("/alarms/{alarm_id}", dependencies=[Depends(ANY)], response_model=AlarmPublic, summary="One alarm")
def get_alarm(request: Request, alarm_id: AlarmId) -> dict[str, Any]:
    return alarms.get(runtime_of(request), alarm_id)


@router.post("/alarms/{alarm_id}/acknowledge", dependencies=[Depends(SCHEDULER)], response_model=AlarmPublic,
             summary="Acknowledge an open alarm (409 once resolved)")
def acknowledge_alarm(request: Request, alarm_id: AlarmId, body: EmptyBody | None = None) -> dict[str, Any]:
    return alarms.acknowledge(runtime_of(request), alarm_id)


@router.post("/alarms/{alarm_id}/resolve", dependencies=[Depends(SCHEDULER)], response_model=AlarmPublic,
             summary="Resolve an alarm (idempotent)")
def resolve_alarm(request: Request, alarm_id: AlarmId, body: EmptyBody | None = None) -> dict[str, Any]:
    return alarms.resolve(runtime_of(request), alarm_id)


@router.post("/webhooks", dependencies=[Depends(SCHEDULER)], status_code=201, response_model=WebhookPublic,
             summary="Subscribe a URL to events")
def create_webhook(request: Request, body: WebhookCreate = Body(...)) -> dict[str, Any]:
    return webhooks.create(runtime_of(request), str(body.url), body.events, body.secret)


@router.get("/webhooks", dependencies=[Depends(ANY)], response_model=WebhooksPublic,
            summary="Subscriptions (secrets are never shown; URLs whole to admin only)",
            description="Readers other than admin see each URL without user, password, query or fragment.")
def list_webhooks(request: Request) -> dict[str, Any]:
    return {"webhooks": webhooks.list_all(runtime_of(request), full=_admin(request))}


@router.get("/webhooks/{webhook_id}/deliveries", dependencies=[Depends(ANY)], response_model=DeliveriesPublic,
            summary="The latest 100 deliveries of a subscription, newest first")
def list_deliveries(request: Request, webhook_id: RowIdInPath) -> dict[str, Any]:
    return {"deliveries": webhooks.deliveries(runtime_of(request), webhook_id, full=_admin(request))}


@router.delete("/webhooks/{webhook_id}", dependencies=[Depends(SCHEDULER)], status_code=204)
def delete_webhook(request: Request, webhook_id: RowIdInPath) -> Response:
    webhooks.delete(runtime_of(request), webhook_id)
    return Response(status_code=204)


@router.post("/jobs/{name}/pauses", dependencies=[Depends(JOB_SIDE)], status_code=201, response_model=PausePublic,
             summary="Announce a pause of the job (a checkpoint): no hang alarm fires during it")
def announce_pause(request: Request, name: NameInPath, body: PauseCreate) -> dict[str, Any]:
    return pauses.announce(runtime_of(request), name, body.duration_s, body.reason)


@router.get("/jobs/{name}/pauses", dependencies=[Depends(ANY)], response_model=PausesPublic, summary="The job's announced pauses")
def list_pauses(request: Request, name: NameInPath) -> dict[str, Any]:
    return {"pauses": pauses.list_pauses(runtime_of(request), name)}


@router.delete("/jobs/{name}/pauses", dependencies=[Depends(JOB_SIDE)], status_code=204,
               summary="End the job's running pauses now (the pause ended early)")
def end_pauses(request: Request, name: NameInPath) -> Response:
    pauses.end(runtime_of(request), name)
    return Response(status_code=204)


def _admin(request: Request) -> bool:
    """Whether the caller's token is admin's (set by the route's auth dependency)."""
    return getattr(request.state, "role", None) == "admin"
