"""Pauses jobs announce (checkpoints), keyed by job name: no hang alarm fires during one."""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from controller.store.tables import JobPauseRow

KEEP_ENDED_US = 24 * 3600 * 1_000_000  # ended pauses are kept a day, for the record


def add(session: Session, job: str, from_us: int, until_us: int, reason: str | None,
        now_us: int) -> JobPauseRow:
    row = JobPauseRow(job=job, from_us=from_us, until_us=until_us, reason=reason,
                      created_at_us=now_us)
    session.add(row)
    session.flush()
    session.execute(delete(JobPauseRow).where(JobPauseRow.until_us < now_us - KEEP_ENDED_US))
    return row


def of_job(session: Session, job: str) -> list[JobPauseRow]:
    return list(session.scalars(select(JobPauseRow).where(JobPauseRow.job == job)
                                .order_by(JobPauseRow.from_us, JobPauseRow.id)))


def end_now(session: Session, job: str, now_us: int) -> int:
    """End the job's pauses still running; returns how many."""
    result = session.execute(update(JobPauseRow)
                             .where(JobPauseRow.job == job, JobPauseRow.until_us > now_us)
                             .values(until_us=now_us))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def recent(session: Session, since_us: int) -> dict[str, list[tuple[int, int]]]:
    """Every job's pauses that ended after `since_us`: job -> [(from_us, until_us)]."""
    out: dict[str, list[tuple[int, int]]] = {}
    for row in session.scalars(select(JobPauseRow).where(JobPauseRow.until_us > since_us)
                               .order_by(JobPauseRow.from_us, JobPauseRow.id)):
        out.setdefault(row.job, []).append((row.from_us, row.until_us))
    return out


def forget_job(session: Session, job: str) -> None:
    session.execute(delete(JobPauseRow).where(JobPauseRow.job == job))
