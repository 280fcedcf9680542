"""One incident, one alarm: findings dedup across comms and collectives; quiet window resolves."""

from __future__ import annotations

from controller.diagnosis.findings import Finding
from controller.diagnosis.incidents import IncidentTracker
from controller.domain.alarms import AlarmKind, Suspect, SuspectKind

HOST5 = Suspect(SuspectKind.HOST, "host5")
RANK5 = Suspect(SuspectKind.RANK, "5")
HOST9 = Suspect(SuspectKind.HOST, "host9")
QUIET_US = 10_000_000


def _finding(comm: str, seq: int, *suspects: Suspect,
             kind: AlarmKind = AlarmKind.NONCOMM_HANG, job: str = "j") -> Finding:
    return Finding(kind, job, comm, seq, suspects, {"summary": "x"})


def test_same_fault_seen_in_many_comms_and_collectives_opens_one_alarm() -> None:
    tracker = IncidentTracker()
    events = tracker.observe([_finding("world", 7, HOST5, RANK5), _finding("dp1", 3, HOST5)],
                             1_000, QUIET_US)
    events += tracker.observe([_finding("world", 8, RANK5, HOST5)], 2_000, QUIET_US)
    assert [e.event for e in events] == ["opened"]
    assert events[0].alarm.suspects[0] == HOST5
    assert len(tracker.open_alarms()) == 1


def test_different_suspects_or_kinds_or_jobs_are_different_incidents() -> None:
    tracker = IncidentTracker()
    events = tracker.observe([
        _finding("world", 7, HOST5), _finding("world", 7, HOST9),
        _finding("world", 7, HOST5, kind=AlarmKind.NONCOMM_SLOW), _finding("w", 1, HOST5, job="k"),
    ], 1_000, QUIET_US)
    assert [e.event for e in events] == ["opened"] * 4
    assert len({e.alarm.incident_key for e in events}) == 4


def test_alarm_resolves_after_quiet_window_and_a_recurrence_opens_a_new_one() -> None:
    tracker = IncidentTracker()
    opened = tracker.observe([_finding("world", 7, HOST5)], 0, QUIET_US)
    assert tracker.observe([_finding("world", 8, HOST5)], 5_000_000, QUIET_US) == []
    assert tracker.observe([], 14_000_000, QUIET_US) == []
    resolved = tracker.observe([], 15_000_000, QUIET_US)
    assert [e.event for e in resolved] == ["resolved"]
    assert resolved[0].alarm == opened[0].alarm
    again = tracker.observe([_finding("world", 99, HOST5)], 20_000_000, QUIET_US)
    assert [e.event for e in again] == ["opened"]
    assert again[0].alarm.incident_key != opened[0].alarm.incident_key
