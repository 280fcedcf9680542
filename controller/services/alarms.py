"""Alarms: store what the detectors conclude, list them, acknowledge and resolve them.

`record` applies detector events in one transaction: an `opened` event for an incident
already open changes nothing (one incident, one alarm), even when another detector process
opened it before the job's telemetry shard changed hands (the database allows one alarm that
is not resolved per incident: job, kind, first suspect); opening an alarm whose first
suspect is a host or NIC port isolates that host when `auto_isolate` is on and asks the
job's scheduler to restart without it (`job.restart_requested`). A job's own
`diagnosis.auto_isolate` (in its spec) overrides the setting for its alarms.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from controller.domain.alarms import AlarmEvent, AlarmState, SuspectKind
from controller.services import hosts
from controller.services.clock import now_us
from controller.services.errors import Conflict, NotFound
from controller.services.events import emit
from controller.services.runtime import Runtime
from controller.store import alarms_repo, jobs_repo
from controller.store.db import transaction
from controller.store.tables import AlarmRow

ID_PREFIX = "a-"


def public_id(row_id: int) -> str:
    return f"{ID_PREFIX}{row_id:06d}"


def parse_id(alarm_id: str) -> int:
    digits = alarm_id[len(ID_PREFIX):]
    # Ids are Integer rows: a longer number names no alarm (and would overflow the database's integer).
    if not alarm_id.startswith(ID_PREFIX) or not digits.isdigit() or len(digits) > 10 or int(digits) >= 2**31:
        raise NotFound(f"no alarm {alarm_id!r}; ids look like a-000017")
    return int(digits)


def public(row: AlarmRow) -> dict[str, Any]:
    return {"id": public_id(row.id), "job": row.job, "kind": row.kind, "state": row.state, "comm": row.comm,
            "seq": row.seq, "opened_at_us": row.opened_at_us, "acknowledged_at_us": row.acknowledged_at_us,
            "resolved_at_us": row.resolved_at_us, "resolved_by": row.resolved_by,
            "suspects": row.suspects, "evidence": row.evidence}


def list_alarms(rt: Runtime, job: str | None, state: str | None, kind: str | None, limit: int) -> list[dict[str, Any]]:
    with rt.sessions() as session:
        return [public(r) for r in alarms_repo.listed(session, job, state, kind, limit)]


def get(rt: Runtime, alarm_id: str) -> dict[str, Any]:
    with rt.sessions() as session:
        row = alarms_repo.by_id(session, parse_id(alarm_id))
        if row is None:
            raise NotFound(f"no alarm {alarm_id!r}")
        return public(row)


def acknowledge(rt: Runtime, alarm_id: str) -> dict[str, Any]:
    with transaction(rt.sessions) as session:
        row = alarms_repo.by_id(session, parse_id(alarm_id))
        if row is None:
            raise NotFound(f"no alarm {alarm_id!r}")
        if row.state == AlarmState.RESOLVED:
            raise Conflict(f"alarm {alarm_id} is already resolved")
        if row.state == AlarmState.OPEN:
            row.state, row.acknowledged_at_us = AlarmState.ACKNOWLEDGED.value, now_us()
        return public(row)


def resolve(rt: Runtime, alarm_id: str) -> dict[str, Any]:
    with transaction(rt.sessions) as session:
        row = alarms_repo.by_id(session, parse_id(alarm_id))
        if row is None:
            raise NotFound(f"no alarm {alarm_id!r}")
        if row.state != AlarmState.RESOLVED:
            _resolve(session, row, "operator", now_us())
        return public(row)


def _resolve(session: Session, row: AlarmRow, by: str, at_us: int) -> None:
    row.state, row.resolved_at_us, row.resolved_by = AlarmState.RESOLVED.value, at_us, by
    emit(session, "alarm.resolved", {"alarm": public(row)}, at_us)


def incident_of(incident_key: str) -> str:
    """The incident an alarm reports (job/kind/first suspect): its key without the opening time."""
    return incident_key.rsplit("/", 1)[0] if "/" in incident_key else incident_key


def record(rt: Runtime, events: list[AlarmEvent]) -> list[str]:
    """Apply detector events; returns the public ids of alarms opened."""
    opened: list[str] = []
    if not events:
        return opened
    with transaction(rt.sessions) as session:
        for ev in events:
            a = ev.alarm
            row = alarms_repo.open_by_key(session, a.incident_key)
            if ev.event == "resolved":
                if row is not None:
                    _resolve(session, row, "detector", ev.at_us)
                continue
            if row is not None:
                continue
            incident = incident_of(a.incident_key)
            row = alarms_repo.open_by_incident(session, incident)
            if row is not None:
                # Opened by another detector process before a handover of the job's telemetry
                # shard: the same incident, so no second alarm; its events now resolve it.
                row.incident_key = a.incident_key
                continue
            row = AlarmRow(job=a.job, kind=a.kind.value, state=AlarmState.OPEN.value, comm=a.comm, seq=a.seq,
                           incident_key=a.incident_key, incident=incident, opened_at_us=a.opened_at_us,
                           suspects=[{"kind": s.kind.value, "name": s.name} for s in a.suspects],
                           evidence=dict(a.evidence))
            alarms_repo.add(session, row)
            opened.append(public_id(row.id))
            emit(session, "alarm.opened", {"alarm": public(row)}, ev.at_us)
            _maybe_isolate(rt, session, row, ev.at_us)
    if opened:
        rt.wake_workers()
    return opened


def _auto_isolate(rt: Runtime, session: Session, job: str) -> bool:
    spec = jobs_repo.spec_of(session, job)
    own = spec.get("diagnosis") if isinstance(spec, dict) else None
    if isinstance(own, dict) and isinstance(own.get("auto_isolate"), bool):
        return bool(own["auto_isolate"])
    return rt.settings.auto_isolate


def _maybe_isolate(rt: Runtime, session: Session, row: AlarmRow, at_us: int) -> None:
    if not row.suspects or not _auto_isolate(rt, session, row.job):
        return
    first = row.suspects[0]
    if first["kind"] not in (SuspectKind.HOST.value, SuspectKind.NIC_PORT.value):
        return
    host = first["name"].split(":", 1)[0]
    alarm_id = public_id(row.id)
    try:
        hosts.isolate_in(session, host, f"alarm {alarm_id} ({row.kind})", alarm_id)
    except NotFound:
        return
    emit(session, "job.restart_requested",
         {"job": row.job, "isolated_hosts": [host], "alarm": alarm_id, "reason": row.evidence.get("summary")},
         at_us)
