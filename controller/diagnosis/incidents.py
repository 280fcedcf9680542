"""Incident tracking: one incident opens one alarm, and resolves itself after a quiet window.

Findings of the same job and kind belong to one open incident when they name the same first
suspect, or each one's first suspect is among the other's suspects (evidence that grew and
reordered them), so the many ranks, communicators and collectives that show one
fault open a single alarm. An incident with no finding for `quiet_window_us` resolves. The
tracker returns "opened" and "resolved" events as values; it does no I/O and reads no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.diagnosis.findings import Finding
from controller.domain.alarms import Alarm, AlarmEvent


@dataclass(slots=True)
class _Incident:
    alarm: Alarm
    last_seen_us: int
    findings: int = 1

    def matches(self, finding: Finding) -> bool:
        if finding.job != self.alarm.job or finding.kind != self.alarm.kind:
            return False
        mine, theirs = self.alarm.first_suspect, finding.first_suspect
        if mine is None or theirs is None:
            return mine is None and theirs is None and finding.comm == self.alarm.comm
        return mine == theirs or (mine in finding.suspects and theirs in self.alarm.suspects)


def incident_key(finding: Finding, opened_at_us: int) -> str:
    first = finding.first_suspect
    who = "none" if first is None else f"{first.kind.value}:{first.name}"
    return f"{finding.job}/{finding.kind.value}/{who}/{opened_at_us}"


class IncidentTracker:
    def __init__(self) -> None:
        self._open: dict[str, _Incident] = {}

    def observe(
        self, findings: Sequence[Finding], now_us: int, quiet_window_us: int
    ) -> list[AlarmEvent]:
        events: list[AlarmEvent] = []
        for finding in findings:
            match = next((i for _, i in sorted(self._open.items()) if i.matches(finding)), None)
            if match is not None:
                match.last_seen_us = now_us
                match.findings += 1
                continue
            alarm = Alarm(
                incident_key=incident_key(finding, now_us),
                kind=finding.kind,
                job=finding.job,
                comm=finding.comm,
                seq=finding.seq,
                suspects=finding.suspects,
                evidence=dict(finding.evidence),
                opened_at_us=now_us,
            )
            self._open[alarm.incident_key] = _Incident(alarm, now_us)
            events.append(AlarmEvent("opened", alarm, now_us))
        for key in sorted(self._open):
            if now_us - self._open[key].last_seen_us >= quiet_window_us:
                events.append(AlarmEvent("resolved", self._open.pop(key).alarm, now_us))
        return events

    def close_job(self, job: str, now_us: int) -> list[AlarmEvent]:
        """Resolve every open incident of a job (it ended or restarted)."""
        keys = sorted(k for k, i in self._open.items() if i.alarm.job == job)
        return [AlarmEvent("resolved", self._open.pop(k).alarm, now_us) for k in keys]

    def drop_job(self, job: str) -> None:
        """Forget a job's open incidents without resolving them (another process took the job
        over; its alarms stay open where they are stored)."""
        for key in [k for k, i in self._open.items() if i.alarm.job == job]:
            del self._open[key]

    def open_alarms(self) -> tuple[Alarm, ...]:
        return tuple(self._open[k].alarm for k in sorted(self._open))
