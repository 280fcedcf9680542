"""The C4D entry point: ingest telemetry records, evaluate the detectors at `now_us`.

`Diagnoser` owns the bounded windows and the open incidents. The service calls `ingest` with
each accepted batch and `evaluate` on a clock with the planned routes of the jobs, and applies
the returned events (store alarms, isolate hosts, send webhooks). It opens nothing, reads no
clock, spawns nothing and logs nothing: every time is an argument, every outcome a return value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import Finding
from controller.diagnosis.hangs import (
    StuckCollective,
    detect_comm_hang,
    detect_hang,
    stalled_ranks,
)
from controller.diagnosis.incidents import IncidentTracker
from controller.diagnosis.routes import JobRoutes
from controller.diagnosis.slow import detect_comm_slow, detect_noncomm_slow, rank_timelines
from controller.diagnosis.window import WindowStore
from controller.domain.alarms import Alarm, AlarmEvent
from controller.domain.telemetry import CollectiveRecord


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int
    changed: int


class Diagnoser:
    """Usage::

        diagnoser = Diagnoser(DiagnosisConfig())
        diagnoser.ingest(records, now_us)                 # after each telemetry batch
        events = diagnoser.evaluate(routes_by_job, now_us)  # every second or so
    """

    def __init__(self, config: DiagnosisConfig) -> None:
        self.config = config
        self._store = WindowStore(config.window_collectives, config.max_comms_per_job)
        self._incidents = IncidentTracker()

    def ingest(self, records: Iterable[CollectiveRecord], now_us: int) -> IngestResult:
        """Store records by identity; returns how many came and how many changed anything."""
        accepted = changed = 0
        for record in records:
            accepted += 1
            changed += self._store.put(record, now_us)
        return IngestResult(accepted, changed)

    def findings(self, routes: Mapping[str, JobRoutes], now_us: int) -> list[Finding]:
        """What the detectors see now, before incident tracking (for dry runs and tests)."""
        out: list[Finding] = []
        for job in self._store.jobs():
            windows = self._store.windows(job)
            job_routes = routes.get(job)
            stalled: dict[str, set[int]] = {
                w.comm: stalled_ranks(w, self.config, now_us) for w in windows
            }
            stuck: list[StuckCollective] = []
            for window in windows:
                elsewhere = set().union(*(s for c, s in stalled.items() if c != window.comm))
                hang = detect_hang(window, job_routes, self.config, now_us, elsewhere)
                if isinstance(hang, StuckCollective):
                    stuck.append(hang)
                elif hang is not None:
                    out.append(hang)
            comm_hang = detect_comm_hang(job, stuck, job_routes)
            if comm_hang is not None:
                out.append(comm_hang)
            out.extend(detect_comm_slow(windows, job_routes, self.config))
            timelines = rank_timelines(windows)
            for window in windows:
                late = detect_noncomm_slow(window, timelines, job_routes, self.config)
                if late is not None:
                    out.append(late)
        return out

    def evaluate(self, routes: Mapping[str, JobRoutes], now_us: int) -> list[AlarmEvent]:
        """Run every detector at `now_us`; return the alarms opened and resolved since the last
        call. `routes` maps job name to its planned routes; a job without routes is still
        diagnosed, down to hosts and ranks."""
        self._store.expire(now_us, self.config.comm_idle_expiry_us)
        findings = self.findings(routes, now_us)
        return self._incidents.observe(findings, now_us, self.config.quiet_window_us)

    def forget_job(self, job: str, now_us: int) -> list[AlarmEvent]:
        """Drop a job's windows (deleted or restarted) and resolve its open alarms."""
        self._store.forget_job(job)
        return self._incidents.close_job(job, now_us)

    def open_alarms(self) -> tuple[Alarm, ...]:
        return self._incidents.open_alarms()

    def record_count(self) -> int:
        """Records held in all windows; bounded by the configuration, not by run length."""
        return self._store.record_count()
