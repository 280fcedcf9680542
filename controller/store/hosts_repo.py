"""Hosts' states (active / isolated) and their agents' telemetry state, keyed by host name."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controller.store.tables import HostRow, HostStateRow, HostTelemetryRow


def names(session: Session) -> list[str]:
    """Every host of the fabric."""
    return list(session.scalars(select(HostRow.name)))


def exists(session: Session, name: str) -> bool:
    return session.scalar(select(HostRow.id).where(HostRow.name == name)) is not None


def state(session: Session, name: str) -> HostStateRow | None:
    return session.get(HostStateRow, name)


def telemetry_of(session: Session, name: str) -> HostTelemetryRow | None:
    return session.get(HostTelemetryRow, name)


def states(session: Session) -> dict[str, HostStateRow]:
    return {r.name: r for r in session.scalars(select(HostStateRow))}


def isolated(session: Session) -> set[str]:
    return set(session.scalars(select(HostStateRow.name).where(HostStateRow.state == "isolated")))


def isolated_among(session: Session, names: Iterable[str]) -> set[str]:
    """Which of `names` are isolated (one narrow statement)."""
    wanted = sorted(set(names))
    if not wanted:
        return set()
    return set(session.scalars(select(HostStateRow.name).where(HostStateRow.state == "isolated",
                                                               HostStateRow.name.in_(wanted))))


def set_state(session: Session, name: str, state: str, reason: str | None, now_us: int,
              alarm_id: str | None = None) -> HostStateRow:
    row = session.get(HostStateRow, name)
    if row is None:
        row = HostStateRow(name=name, state=state, reason=reason, alarm_id=alarm_id, changed_at_us=now_us)
        session.add(row)
    else:
        row.state, row.reason, row.alarm_id, row.changed_at_us = state, reason, alarm_id, now_us
    session.flush()
    return row


def telemetry(session: Session) -> dict[str, HostTelemetryRow]:
    return {r.name: r for r in session.scalars(select(HostTelemetryRow))}


def telemetry_gaps(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(HostTelemetryRow)
                              .where(HostTelemetryRow.state == "gap")) or 0)


def put_telemetry(session: Session, name: str, state: str, last_heard_us: int,
                  gap_since_us: int | None, now_us: int) -> None:
    row = session.get(HostTelemetryRow, name)
    if row is None:
        session.add(HostTelemetryRow(name=name, state=state, last_heard_us=last_heard_us,
                                     gap_since_us=gap_since_us, changed_at_us=now_us))
        return
    if row.state != state:
        row.changed_at_us = now_us
    row.state, row.last_heard_us, row.gap_since_us = state, last_heard_us, gap_since_us
