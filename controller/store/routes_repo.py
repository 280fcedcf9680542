"""Read the planned routes of active jobs, as columns (no ORM rows): what the link-load views
need. Writes of flow rows belong to the planner's repository, not here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from controller.store.tables import FlowRow, JobRow

ACTIVE = ("pending", "planned")


@dataclass(frozen=True, slots=True)
class ActiveJobRef:
    """An active job's identity and spec, enough to know its flows and whether they are planned."""

    id: int
    name: str
    version: int
    status: str
    spec: dict[str, Any]


def active_jobs(session: Session) -> list[ActiveJobRef]:
    """Pending and planned jobs, by name."""
    rows = session.execute(select(JobRow.id, JobRow.name, JobRow.version, JobRow.status, JobRow.spec)
                           .where(JobRow.status.in_(ACTIVE)).order_by(JobRow.name))
    return [ActiveJobRef(i, n, v, s, spec) for i, n, v, s, spec in rows]


def planned_paths(session: Session, job_id: int) -> list[tuple[str, str, tuple[str, ...]]]:
    """`(src_host, src_nic, path)` of each flow of the job that has a path."""
    rows = session.execute(select(FlowRow.src_host, FlowRow.src_nic, FlowRow.path).where(FlowRow.job_id == job_id))
    return [(h, n, tuple(p)) for h, n, p in rows if p]


def job_exists(session: Session, name: str) -> bool:
    return session.scalar(select(JobRow.id).where(JobRow.name == name)) is not None
