"""Alarms stay single across a handover of a job's telemetry: a detector process that sees an
incident another process already opened adopts the stored alarm (no second alarm, no second
`alarm.opened` webhook) and its own events resolve it; the database refuses a second open
alarm per incident even when two writers race. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from controller.domain.alarms import Alarm, AlarmEvent, AlarmKind, Suspect, SuspectKind
from controller.services import alarms
from controller.services.runtime import Runtime
from controller.store.db import transaction
from controller.store.tables import AlarmRow, OutboxRow, WebhookRow


def _event(event: str, opened_at_us: int, at_us: int) -> AlarmEvent:
    suspect = Suspect(SuspectKind.HOST, "host5")
    key = f"train/noncomm_hang/host:host5/{opened_at_us}"
    alarm = Alarm(incident_key=key, kind=AlarmKind.NONCOMM_HANG, job="train", comm="world", seq=3,
                  suspects=(suspect,), evidence={"summary": "rank 5 never entered"}, opened_at_us=opened_at_us)
    return AlarmEvent(event, alarm, at_us)  # type: ignore[arg-type]


def _counts(runtime: Runtime) -> tuple[int, int]:
    with runtime.sessions() as s:
        return (int(s.scalar(select(func.count()).select_from(AlarmRow)) or 0),
                int(s.scalar(select(func.count()).select_from(OutboxRow).where(OutboxRow.event == "alarm.opened")) or 0))


def test_a_second_owner_adopts_the_open_alarm(runtime: Runtime) -> None:
    with transaction(runtime.sessions) as s:
        s.add(WebhookRow(url="http://127.0.0.1:9/h", events=["alarm.opened", "alarm.resolved"], secret="s3cret-s3cret",
                         created_at_us=1))
    first = alarms.record(runtime, [_event("opened", 1_000, 1_000)])  # the first owner
    assert len(first) == 1
    again = alarms.record(runtime, [_event("opened", 9_000, 9_000)])  # the next owner, after a handover
    assert again == [] and _counts(runtime) == (1, 1)
    alarms.record(runtime, [_event("resolved", 9_000, 20_000)])  # the next owner's own resolution
    with runtime.sessions() as s:
        [row] = s.scalars(select(AlarmRow)).all()
    assert row.state == "resolved" and row.resolved_by == "detector" and row.opened_at_us == 1_000
    # A new occurrence after the resolution is a new alarm.
    assert len(alarms.record(runtime, [_event("opened", 30_000, 30_000)])) == 1
    assert _counts(runtime) == (2, 2)


def test_the_database_refuses_a_second_open_alarm_per_incident(runtime: Runtime) -> None:
    alarms.record(runtime, [_event("opened", 1_000, 1_000)])
    with pytest.raises(IntegrityError), transaction(runtime.sessions) as s:  # a racing writer
        s.add(AlarmRow(job="train", kind="noncomm_hang", state="open", comm="world", seq=3,
                       incident_key="train/noncomm_hang/host:host5/2000", incident="train/noncomm_hang/host:host5",
                       suspects=[], evidence={}, opened_at_us=2_000))
    assert _counts(runtime)[0] == 1
