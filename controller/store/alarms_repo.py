"""Alarms: the rows C4D's detectors open, operators acknowledge and resolve."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controller.domain.alarms import AlarmState
from controller.store.tables import AlarmRow


def listed(session: Session, job: str | None, state: str | None, kind: str | None, limit: int) -> list[AlarmRow]:
    """Newest first, filtered by what is given."""
    query = select(AlarmRow).order_by(AlarmRow.id.desc()).limit(limit)
    if job:
        query = query.where(AlarmRow.job == job)
    if state:
        query = query.where(AlarmRow.state == state)
    if kind:
        query = query.where(AlarmRow.kind == kind)
    return list(session.scalars(query))


def by_id(session: Session, alarm_id: int) -> AlarmRow | None:
    return session.get(AlarmRow, alarm_id)


def add(session: Session, row: AlarmRow) -> AlarmRow:
    session.add(row)
    session.flush()
    return row


def open_by_key(session: Session, incident_key: str) -> AlarmRow | None:
    """The unresolved alarm opened for exactly this detector incident, if any."""
    return session.scalar(select(AlarmRow).where(AlarmRow.incident_key == incident_key,
                                                 AlarmRow.state != AlarmState.RESOLVED.value))


def open_by_incident(session: Session, incident: str) -> AlarmRow | None:
    """The unresolved alarm of this incident (job, kind, first suspect), whoever opened it."""
    return session.scalar(select(AlarmRow).where(AlarmRow.incident == incident,
                                                 AlarmRow.state != AlarmState.RESOLVED.value))
