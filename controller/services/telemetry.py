"""Telemetry ingest and the C4D detector worker.

Ingest validates a batch against what the controller knows (the job exists, the host is in
the fabric, ranks fit the job) and appends it to an in-memory queue; it never waits on the
detectors. The detector worker drains the queue into the pure `Diagnoser`, evaluates it
with the jobs' planned routes at `now`, and stores the alarm events it returns.

Telemetry is per process: with several uvicorn workers or replicas, send a job's
telemetry to one of them (see README, Decisions).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import Counter, Gauge
from sqlalchemy import select

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.routes import JobRoutes, PlannedFlow
from controller.domain.alarms import AlarmEvent
from controller.domain.problems import Problem
from controller.domain.telemetry import CollectiveRecord
from controller.services import alarms
from controller.services.clock import now_us
from controller.services.errors import Invalid, Unavailable
from controller.services.runtime import Runtime
from controller.services.timings import DETECTOR_SECONDS
from controller.services.workers import PeriodicWorker
from controller.store import flows_repo, jobs_repo
from controller.store.tables import HostRow

MAX_QUEUED_RECORDS = 2_000_000
JOB_CACHE_S = 2.0

INGESTED = Counter("c4_telemetry_records_total", "Collective records accepted")
REFUSED = Counter("c4_telemetry_batches_refused_total", "Telemetry batches refused", ["reason"])
WINDOW_RECORDS = Gauge("c4_diagnosis_window_records", "Records held in the detectors' windows")
QUEUED = Gauge("c4_telemetry_queue_records", "Records accepted but not yet seen by the detectors")


class _JobIndex:
    """Job name -> its ranks; hosts of the fabric. Refreshed on a miss or every few seconds."""

    def __init__(self) -> None:
        self.jobs: dict[str, frozenset[int]] = {}
        self.hosts: set[str] = set()
        self.loaded_at = 0.0

    def refresh(self, rt: Runtime) -> None:
        with rt.sessions() as session:
            self.jobs = {name: frozenset(int(r["rank"]) for r in spec.get("ranks", []) if isinstance(r, dict))
                         for name, spec in jobs_repo.ranks(session).items()}
            self.hosts = set(session.scalars(select(HostRow.name)))
        self.loaded_at = time.monotonic()

    def stale(self) -> bool:
        return time.monotonic() - self.loaded_at > JOB_CACHE_S


class Telemetry:
    """One per process: the ingest queue, the diagnoser and the detector worker."""

    def __init__(self, rt: Runtime) -> None:
        s = rt.settings
        self.rt = rt
        self.config = DiagnosisConfig(hang_timeout_s=s.hang_timeout_s, slow_factor=s.slow_factor,
                                      slow_window=s.slow_window, window_collectives=max(32, 3 * s.slow_window),
                                      quiet_window_s=s.alarm_quiet_s)
        self.diagnoser = Diagnoser(self.config)
        self._queue: deque[CollectiveRecord] = deque()
        self._index = _JobIndex()
        self._index_lock = threading.Lock()
        self._routes: dict[str, tuple[int, JobRoutes]] = {}
        self._unsaved: list[AlarmEvent] = []
        self._seen: set[str] = set()  # jobs whose telemetry the diagnoser holds
        self._step_lock = threading.Lock()
        self.worker = PeriodicWorker("detectors", s.detector_interval_s, self.step)

    def ingest(self, host: str, records: Sequence[CollectiveRecord]) -> int:
        """Check a batch and queue it whole; raises Invalid naming the field, nothing queued."""
        if not self.rt.leading:
            REFUSED.labels("not_leader").inc()
            raise Unavailable("this controller process does not run the detectors; retry (another process leads)",
                              {"retry": True})
        problems = self._check(host, records)
        if problems:
            REFUSED.labels("invalid").inc()
            raise Invalid(problems)
        if len(self._queue) + len(records) > MAX_QUEUED_RECORDS:
            REFUSED.labels("overloaded").inc()
            raise Unavailable("the detectors are behind; retry the batch later")
        self._queue.extend(records)
        INGESTED.inc(len(records))
        return len(records)

    def _check(self, host: str, records: Sequence[CollectiveRecord]) -> list[Problem]:
        with self._index_lock:
            index = self._index
            if index.stale() or host not in index.hosts or any(r.job not in index.jobs for r in records):
                index.refresh(self.rt)
        problems = []
        if host not in index.hosts:
            problems.append(Problem(("host",), f"unknown host {host!r}"))
        for i, r in enumerate(records):
            ranks = index.jobs.get(r.job)
            if ranks is None:
                problems.append(Problem(("records", i, "job"), f"unknown job {r.job!r}"))
                continue
            if r.nranks > len(ranks):
                problems.append(Problem(("records", i, "nranks"),
                                        f"communicator of {r.nranks} ranks in a job of {len(ranks)}"))
            if r.rank not in ranks:
                problems.append(Problem(("records", i, "rank"), f"job {r.job!r} has no rank {r.rank}"))
            for j, p in enumerate(r.peers):
                if p.peer not in ranks:
                    problems.append(Problem(("records", i, "peers", j, "peer"), f"job {r.job!r} has no rank {p.peer}"))
        return problems

    def step(self) -> None:
        """Drain the queue, run the detectors at now, store what they conclude."""
        with self._step_lock, DETECTOR_SECONDS.time():
            self._step()

    def _step(self) -> None:
        now = now_us()
        drained = []
        while self._queue:
            drained.append(self._queue.popleft())
        if drained:
            self.diagnoser.ingest(drained, now)
            self._seen.update(r.job for r in drained)
        routes, gone = self._load_routes()
        events = [ev for job in gone for ev in self.diagnoser.forget_job(job, now)]
        events += self.diagnoser.evaluate(routes, now)
        # The diagnoser has moved on once it returns events: keep them until they are stored,
        # or an outage of the database would lose an alarm (and its isolation) for good.
        self._unsaved += events
        alarms.record(self.rt, self._unsaved)
        self._unsaved = []
        WINDOW_RECORDS.set(self.diagnoser.record_count())
        QUEUED.set(len(self._queue))

    def _load_routes(self) -> tuple[dict[str, JobRoutes], list[str]]:
        """Planned routes of the jobs that sent telemetry, rebuilt when a job's version moves;
        and the jobs that no longer exist. Jobs without telemetry cost one row each here, so a
        re-plan of a big job that nobody monitors yet does not reload its flows."""
        with self.rt.sessions() as session:
            versions = jobs_repo.versions(session)
            out: dict[str, JobRoutes] = {}
            for job in sorted(self._seen & versions.keys()):
                cached = self._routes.get(job)
                if cached is None or cached[0] != versions[job]:
                    job_id, spec = jobs_repo.id_and_spec(session, job) or (0, {})
                    flows = flows_repo.planned_routes(session, job_id)
                    cached = (versions[job], _routes(job, spec, flows))
                    self._routes[job] = cached
                out[job] = cached[1]
        gone = sorted(self._seen - versions.keys())
        for job in gone:
            self._seen.discard(job)
            self._routes.pop(job, None)
        return out, gone


def _routes(job: str, spec: dict[str, object], flows: Iterable[tuple[Any, ...]]) -> JobRoutes:
    ranks = spec.get("ranks", [])
    rank_hosts = {int(r["rank"]): str(r["host"]) for r in ranks if isinstance(r, dict)} if isinstance(ranks, list) else {}
    connections: dict[tuple[int, int], list[PlannedFlow]] = {}
    for src_rank, dst_rank, src_host, src_nic, src_port, dst_host, dst_nic, dst_port, path, links, sport in flows:
        if path is None or links is None:
            continue
        connections.setdefault((src_rank, dst_rank), []).append(PlannedFlow(
            src_host=src_host, src_port=f"{src_host}:{src_nic}:{src_port}", dst_host=dst_host,
            dst_port=f"{dst_host}:{dst_nic}:{dst_port}", path=tuple(path), links=tuple(links), sport=sport))
    return JobRoutes(job, rank_hosts, {k: tuple(v) for k, v in sorted(connections.items())})
