"""Hosts' states (active / isolated), keyed by host name."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controller.store.tables import HostStateRow


def states(session: Session) -> dict[str, HostStateRow]:
    return {r.name: r for r in session.scalars(select(HostStateRow))}


def isolated(session: Session) -> set[str]:
    return set(session.scalars(select(HostStateRow.name).where(HostStateRow.state == "isolated")))


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
