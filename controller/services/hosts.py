"""Hosts' states: list, isolate, release; jobs using an isolated host are flagged.

Isolation is idempotent: isolating an isolated host changes nothing and emits nothing.
`isolate_in` works inside a caller's transaction so automatic isolation by an alarm commits
with the alarm itself. Each host also shows its node agent's telemetry as the detectors last
wrote it: `reporting`, `gap` (silent for `C4_TELEMETRY_GAP_S`: its ranks are unknown to the
detectors, never hang suspects by that alone) or `unknown` (never heard).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from controller.services.clock import now_us
from controller.services.errors import NotFound
from controller.services.events import emit
from controller.services.runtime import Runtime
from controller.store import fabric_repo, hosts_repo, jobs_repo
from controller.store.db import transaction
from controller.store.tables import HostStateRow, HostTelemetryRow, JobRow

ACTIVE_JOB_STATES = ("pending", "planned")


def _public(name: str, row: HostStateRow | None, seen: HostTelemetryRow | None = None) -> dict[str, Any]:
    telemetry = ({"state": "unknown", "last_heard_us": None, "gap_since_us": None} if seen is None else
                 {"state": seen.state, "last_heard_us": seen.last_heard_us, "gap_since_us": seen.gap_since_us})
    if row is None:
        return {"name": name, "state": "active", "reason": None, "alarm": None, "changed_at_us": None,
                "telemetry": telemetry}
    return {"name": name, "state": row.state, "reason": row.reason, "alarm": row.alarm_id,
            "changed_at_us": row.changed_at_us, "telemetry": telemetry}


def list_hosts(rt: Runtime, state: str | None = None, telemetry: str | None = None) -> list[dict[str, Any]]:
    with rt.sessions() as session:
        names = hosts_repo.names(session)
        states = hosts_repo.states(session)
        seen = hosts_repo.telemetry(session)
    hosts = [_public(n, states.get(n), seen.get(n)) for n in sorted(names)]
    return [h for h in hosts if (state is None or h["state"] == state)
            and (telemetry is None or h["telemetry"]["state"] == telemetry)]


def job_hosts(spec: dict[str, Any]) -> set[str]:
    return {str(r.get("host")) for r in spec.get("ranks", []) if isinstance(r, dict)}


def _reflag_jobs(session: Session) -> list[JobRow]:
    """Flag active jobs that use an isolated host, unflag the others; returns newly flagged."""
    isolated = hosts_repo.isolated(session)
    newly = []
    for job in jobs_repo.active(session):
        bad = sorted(job_hosts(job.spec) & isolated)
        if bad and not job.flagged:
            newly.append(job)
        job.flagged = bool(bad)
        job.flag_reason = f"uses isolated host(s): {', '.join(bad)}" if bad else None
    return newly


def isolate_in(session: Session, name: str, reason: str, alarm_id: str | None = None) -> tuple[bool, list[str]]:
    """Isolate `name` in the caller's transaction; returns (changed, names of jobs flagged).
    Under the fabric's lock, as a job's POST checks its hosts: a job is either refused or
    flagged, never accepted on a host isolated meanwhile."""
    fabric_repo.lock(session)
    if not hosts_repo.exists(session, name):
        raise NotFound(f"no host named {name!r}", {"host": name})
    current = hosts_repo.state(session, name)
    if current is not None and current.state == "isolated":
        return False, []
    now = now_us()
    hosts_repo.set_state(session, name, "isolated", reason, now, alarm_id)
    flagged = _reflag_jobs(session)
    jobs = sorted(j.name for j in jobs_repo.active(session)
                  if name in job_hosts(j.spec))
    emit(session, "host.isolated", {"host": name, "reason": reason, "alarm": alarm_id, "jobs": jobs}, now)
    return True, [j.name for j in flagged]


def isolate(rt: Runtime, name: str, reason: str) -> dict[str, Any]:
    with transaction(rt.sessions) as session:
        isolate_in(session, name, reason)
        row = hosts_repo.state(session, name)
        result = _public(name, row, hosts_repo.telemetry_of(session, name))
    rt.wake_workers()
    return result


def release(rt: Runtime, name: str) -> dict[str, Any]:
    with transaction(rt.sessions) as session:
        if not hosts_repo.exists(session, name):
            raise NotFound(f"no host named {name!r}", {"host": name})
        row = hosts_repo.state(session, name)
        if row is not None and row.state == "isolated":
            now = now_us()
            row = hosts_repo.set_state(session, name, "active", None, now)
            _reflag_jobs(session)
            emit(session, "host.released", {"host": name}, now)
        result = _public(name, row, hosts_repo.telemetry_of(session, name))
    rt.wake_workers()
    return result
