"""The C4D entry point: ingest telemetry records, evaluate the detectors at `now_us`.

`Diagnoser` owns the bounded windows, the hosts' clock offsets and liveness, the jobs' own
settings and the open incidents. The service calls `ingest` with each accepted batch (and
`heard_from` for an empty one), and `evaluate` on a clock with the planned routes of the jobs
and their announced pauses, and applies the returned events (store alarms, isolate hosts, send
webhooks). Hang and slow findings are localised across jobs: an element that stalls or slows
several jobs is named in each of their alarms. It opens nothing, reads no clock, spawns nothing
and logs nothing: every time is an argument, every outcome a return value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controller.diagnosis.clocks import HostClocks
from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import Finding
from controller.diagnosis.hangs import (
    HangContext,
    StuckCollective,
    detect_comm_hang,
    detect_hang,
    in_flight_ranks,
)
from controller.diagnosis.incidents import IncidentTracker
from controller.diagnosis.matrix import matrix
from controller.diagnosis.routes import JobRoutes
from controller.diagnosis.slow import (
    SlowCells,
    detect_comm_slow,
    detect_noncomm_slow,
    rank_timelines,
    slow_cells,
)
from controller.diagnosis.window import WindowStore
from controller.domain.alarms import Alarm, AlarmEvent, AlarmKind
from controller.domain.jobs import JobDiagnosis
from controller.domain.telemetry import CollectiveRecord

Pauses = Mapping[str, Sequence[tuple[int, int]]]  # job -> announced [from_us, until_us)


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int
    changed: int


@dataclass(frozen=True, slots=True)
class HostTelemetry:
    """A host's agent as the detectors see it: when it was first and last heard, and since
    when it has been silent (None while it reports)."""

    host: str
    first_heard_us: int
    last_heard_us: int
    gap_since_us: int | None


class Diagnoser:
    """Usage::

        diagnoser = Diagnoser(DiagnosisConfig())
        diagnoser.ingest(records, arrival_us)                     # after each telemetry batch
        diagnoser.heard_from(host, arrival_us)                    # after an empty batch
        events = diagnoser.evaluate(routes_by_job, now_us, pauses)  # every second or so
    """

    def __init__(self, config: DiagnosisConfig) -> None:
        self.config = config
        self._store = WindowStore(config.window_collectives, config.max_comms_per_job)
        self._incidents = IncidentTracker()
        self._clocks = HostClocks()
        self._job_configs: dict[str, DiagnosisConfig] = {}
        self._held: dict[str, int] = {}  # job -> since when an ambiguous comm_slow is held

    def set_job_settings(self, job: str, settings: JobDiagnosis | None) -> None:
        """A job's own thresholds (its spec's `diagnosis`); None: the defaults."""
        config = self.config.for_job(settings)
        if config == self.config:
            self._job_configs.pop(job, None)
            return
        self._job_configs[job] = config
        self._store.set_job_window(job, config.window_collectives)

    def config_for(self, job: str) -> DiagnosisConfig:
        return self._job_configs.get(job, self.config)

    def heard_from(self, host: str, arrival_us: int) -> None:
        """The host's agent posted (an empty batch is a heartbeat)."""
        self._clocks.heard(host, arrival_us)

    def ingest(self, records: Iterable[CollectiveRecord], arrival_us: int) -> IngestResult:
        """Store records by identity; returns how many came and how many changed anything.
        `arrival_us`: when they reached the controller (controller clock)."""
        accepted = changed = 0
        for record in records:
            accepted += 1
            self._clocks.observe(record, arrival_us)
            changed += self._store.put(record, arrival_us)
        return IngestResult(accepted, changed)

    def findings(self, routes: Mapping[str, JobRoutes], now_us: int,
                 pauses: Pauses | None = None, down_links: Mapping[str, str] | None = None) -> list[Finding]:
        """What the detectors see now, before incident tracking (for dry runs and tests)."""
        out: list[Finding] = []
        stuck: list[StuckCollective] = []
        evidence: dict[str, list[CollectiveRecord]] = {}
        contexts: dict[str, HangContext] = {}
        cells: list[SlowCells] = []
        for job in self._store.jobs():
            config = self.config_for(job)
            windows = self._store.windows(job)
            job_routes = routes.get(job)
            ctx = HangContext(now_us, config, self._clocks,
                              tuple((pauses or {}).get(job, ())))
            contexts[job] = ctx
            inside = {w.comm: in_flight_ranks(w) for w in windows}
            unread: list[tuple[Finding, set[int]]] = []
            for window in windows:
                elsewhere = set().union(*(s for c, s in inside.items() if c != window.comm))
                hang = detect_hang(window, job_routes, ctx, elsewhere)
                if isinstance(hang, StuckCollective):
                    stuck.append(hang)
                elif hang is None:
                    continue
                elif hang.evidence.get("stuck_by") == ["not_read"]:
                    unread.append((hang, elsewhere))
                else:
                    out.append(hang)
            out.extend(_not_victims(unread, [s for s in stuck if s.job == job and s.stuck]))
            if any(s.job == job for s in stuck):
                evidence[job] = [rec for w in windows for seq in w.sorted_seqs()[-2:]
                                 for rec in w.seqs[seq].values()]
            cells.append(slow_cells(job, windows, config))
            timelines = rank_timelines(windows)
            for window in windows:
                late = detect_noncomm_slow(window, timelines, job_routes, config)
                if late is not None:
                    out.append(late)
        out.extend(detect_comm_hang(stuck, evidence, routes, contexts, down_links or {}))
        out.extend(detect_comm_slow(cells, routes))
        return out

    def evaluate(self, routes: Mapping[str, JobRoutes], now_us: int,
                 pauses: Pauses | None = None, down_links: Mapping[str, str] | None = None,
                 link_reports: bool = False) -> list[AlarmEvent]:
        """Run every detector at `now_us`; return the alarms opened and resolved since the last
        call. `routes` maps job name to its planned routes (a job without routes is still
        diagnosed, down to hosts and ranks); `pauses` the pauses jobs announced; `down_links`
        the fabric links reported down now (link name -> why: an operator's state, a switch's
        ifOperStatus), strong evidence for a hang whose stuck flows cross one; `link_reports`:
        whether switches report their ports' state at all (then a hang naming no reported link
        waits `link_report_hold_s` past its timeout for a late report)."""
        self._store.expire(now_us, self.config.comm_idle_expiry_us)
        findings = self._hold_ambiguous(self.findings(routes, now_us, pauses, down_links), now_us)
        if link_reports:
            findings = self._hold_for_link_reports(findings)
        return self._incidents.observe(findings, now_us, self.config.quiet_window_us)

    def _hold_ambiguous(self, findings: list[Finding], now_us: int) -> list[Finding]:
        """Hold a comm_slow finding whose first suspect is one of several equal explanations
        for `ambiguity_hold_s`: the evidence that tells them apart (another job's slowed
        connections, more of this job's) may be a few collectives behind."""
        out: list[Finding] = []
        ambiguous: set[str] = set()
        for f in findings:
            ties = f.evidence.get("equally_likely_any_kind", 1)
            if f.kind != AlarmKind.COMM_SLOW or not isinstance(ties, int) or ties <= 1:
                out.append(f)
                continue
            ambiguous.add(f.job)
            since = self._held.setdefault(f.job, now_us)
            if now_us - since >= int(self.config_for(f.job).ambiguity_hold_s * 1_000_000):
                out.append(f)
        for job in set(self._held) - ambiguous:
            del self._held[job]
        return out

    def _hold_for_link_reports(self, findings: list[Finding]) -> list[Finding]:
        """Drop (for now) comm_hang findings that name no link reported down and whose stall is
        younger than the hang timeout plus `link_report_hold_s`: a switch's report of a dead
        port may still be on its way, and it would name the link instead."""
        out: list[Finding] = []
        for f in findings:
            stalled = f.evidence.get("stalled_s")
            if f.kind == AlarmKind.COMM_HANG and "reported_down" not in f.evidence \
                    and isinstance(stalled, (int, float)):
                config = self.config_for(f.job)
                if stalled < config.hang_timeout_s + config.link_report_hold_s:
                    continue
            out.append(f)
        return out

    def forget_job(self, job: str, now_us: int) -> list[AlarmEvent]:
        """Drop a job's windows (deleted or restarted) and resolve its open alarms."""
        self._store.forget_job(job)
        self._job_configs.pop(job, None)
        return self._incidents.close_job(job, now_us)

    def drop_job(self, job: str) -> None:
        """Drop a job's windows, settings and open incidents with no event: another detector
        process owns its telemetry now (its open alarms stay open; the new owner adopts them)."""
        self._store.forget_job(job)
        self._job_configs.pop(job, None)
        self._held.pop(job, None)
        self._incidents.drop_job(job)

    def hosts(self, now_us: int) -> list[HostTelemetry]:
        """Every host whose agent was ever heard, with its telemetry gap if it is silent."""
        gap_us = self.config.telemetry_gap_us
        return [HostTelemetry(h, self._clocks.first_heard_us[h], self._clocks.heard_us[h],
                              self._clocks.silent_since_us(h, now_us, gap_us))
                for h in self._clocks.hosts()]

    def rate_matrix(self, job: str) -> list[dict[str, object]]:
        """Per communicator of the job, its rate matrix (median cells over the window)."""
        config = self.config_for(job)
        return [matrix(w, config) for w in self._store.windows(job)]

    def open_alarms(self) -> tuple[Alarm, ...]:
        return self._incidents.open_alarms()

    def record_count(self) -> int:
        """Records held in all windows; bounded by the configuration, not by run length."""
        return self._store.record_count()


def _not_victims(unread: list[tuple[Finding, set[int]]], stuck: list[StuckCollective]) -> list[Finding]:
    """The ranks-stopped-reading findings (`hangs._not_read`, each with the ranks inside a
    collective of another communicator of the job) that are not victims. While a communicator
    of the job is stuck on the network (its connections named by evidence), a rank inside
    another communicator's collective does not read this one's bytes because it waits there,
    behind the stuck one: that hang names the element, and naming the waiting rank's host
    would isolate a healthy host (c4's simulator: a dead NIC port under world and
    data-parallel rings, a data-parallel rank waiting in the world ring read as a stopped
    process). A stopped process with no network hang in its job is still named."""
    out = []
    for f, elsewhere in unread:
        named = f.evidence.get("not_reading_ranks")
        ranks = set(named) if isinstance(named, list) else set()
        if not ranks or not ranks <= elsewhere or not any(s.comm != f.comm for s in stuck):
            out.append(f)
    return out
