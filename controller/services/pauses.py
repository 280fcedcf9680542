"""Pauses a job announces (a checkpoint, an evaluation): no hang alarm fires for the job
while one lasts, and a stall that overlapped one counts from its end.

A scheduler or the training loop itself (with an agent token) announces a pause before it
starts; ending it early is allowed. Pauses are stored, so every controller process accepts
them and the detectors' leader reads them on its next step, also after a fail-over.
"""

from __future__ import annotations

from typing import Any

from controller.services.clock import now_us
from controller.services.errors import NotFound
from controller.services.runtime import Runtime
from controller.store import jobs_repo, pauses_repo
from controller.store.db import transaction
from controller.store.tables import JobPauseRow


def _public(row: JobPauseRow, now: int) -> dict[str, Any]:
    return {"id": row.id, "job": row.job, "from_us": row.from_us, "until_us": row.until_us,
            "reason": row.reason, "active": row.from_us <= now < row.until_us}


def _require_job(rt: Runtime, job: str) -> None:
    with rt.sessions() as session:
        if not jobs_repo.exists(session, job):
            raise NotFound(f"no job named {job!r}", {"job": job})


def announce(rt: Runtime, job: str, duration_s: float, reason: str | None) -> dict[str, Any]:
    """A pause of the job from now for `duration_s`."""
    _require_job(rt, job)
    now = now_us()
    with transaction(rt.sessions) as session:
        row = pauses_repo.add(session, job, now, now + int(duration_s * 1_000_000), reason, now)
        return _public(row, now)


def list_pauses(rt: Runtime, job: str) -> list[dict[str, Any]]:
    _require_job(rt, job)
    now = now_us()
    with rt.sessions() as session:
        return [_public(r, now) for r in pauses_repo.of_job(session, job)]


def end(rt: Runtime, job: str) -> int:
    """End the job's running pauses now; returns how many were running."""
    _require_job(rt, job)
    with transaction(rt.sessions) as session:
        return pauses_repo.end_now(session, job, now_us())
