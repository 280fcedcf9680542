"""Telemetry ingest and the C4D detector worker.

Ingest validates a batch against what the controller knows (the job exists, the host is in
the fabric, ranks fit the job) and appends it, with its arrival time, to an in-memory queue;
it never waits on the detectors. An empty batch is a heartbeat: the host's agent is alive.
The detector worker drains the queue into the pure `Diagnoser` (records, or the heartbeat),
evaluates it at `now` with the jobs' planned routes (link directions from the fabric's link
endpoints), their own diagnosis settings (`diagnosis` in the job spec) and the pauses they
announced, stores the alarm events it returns, and writes each host's telemetry state (a
gap when its agent fell silent) for `/v1/hosts` and `/metrics`.

On SQLite (one process) the queue is in memory and the leader runs the detectors. On
PostgreSQL with `telemetry_shards` > 0, every replica accepts telemetry: it appends the batch
to the `telemetry_inbox` table, one row per shard the batch touches (its jobs' shards, plus a
heartbeat row for the host's own shard and its jobs' shards), and every replica runs the
detectors of the shards it owns (services.telemetry_shards), reading their rows. A replica
that takes a shard over replays the shard's last `telemetry_replay_s` of telemetry, so the
detectors' windows survive the death of their owner; alarms stay single across a handover
because the database keeps one alarm per open incident (services.alarms). See README,
Decisions ("Telemetry across replicas").
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import Counter, Gauge

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.routes import JobRoutes, PlannedFlow, link_directions
from controller.domain.alarms import AlarmEvent
from controller.domain.jobs import JobDiagnosis
from controller.domain.problems import Problem
from controller.domain.telemetry import CollectiveRecord
from controller.services import alarms, telemetry_codec
from controller.services.clock import now_us
from controller.services.errors import Invalid, NotFound, Unavailable
from controller.services.runtime import Runtime
from controller.services.switch_telemetry import links_reported_down, oper_reported_since
from controller.services.telemetry_codec import RecordIn
from controller.services.telemetry_shards import ShardOwnership, host_shard, job_shard
from controller.services.timings import DETECTOR_SECONDS
from controller.services.workers import PeriodicWorker
from controller.store import flows_repo, hosts_repo, jobs_repo, pauses_repo, telemetry_inbox_repo
from controller.store.db import transaction

MAX_QUEUED_RECORDS = 2_000_000
JOB_CACHE_S = 2.0
HOST_FLUSH_S = 5.0  # hosts' last-heard times are written this often (state changes at once)
PAUSE_LOOKBACK_US = 3600 * 1_000_000  # pauses that ended this long ago no longer matter

INGESTED = Counter("c4_telemetry_records_total", "Collective records accepted")
HEARTBEATS = Counter("c4_telemetry_heartbeats_total", "Empty telemetry batches (agent heartbeats)")
REFUSED = Counter("c4_telemetry_batches_refused_total", "Telemetry batches refused", ["reason"])
WINDOW_RECORDS = Gauge("c4_diagnosis_window_records", "Records held in the detectors' windows")
QUEUED = Gauge("c4_telemetry_queue_records", "Records accepted but not yet seen by the detectors")
DETECTED = Counter("c4_telemetry_detected_records_total",
                   "Records fed to this process's detectors (replays after a shard takeover included)")
READ_LAG_US = 2_000_000  # inbox rows are re-read this far back: a batch's commit may trail its arrival stamp
READ_PAGE = 2000  # inbox rows per read
PRUNE_EVERY_S = 5.0


def job_diagnosis(spec: dict[str, Any]) -> JobDiagnosis | None:
    """A job's own diagnosis settings from its stored spec document."""
    doc = spec.get("diagnosis")
    if not isinstance(doc, dict):
        return None
    return JobDiagnosis(doc.get("hang_timeout_s"), doc.get("slow_factor"), doc.get("slow_window"),
                        doc.get("auto_isolate"))


class _JobIndex:
    """Job name -> its ranks; hosts of the fabric. Refreshed on a miss or every few seconds."""

    def __init__(self) -> None:
        self.jobs: dict[str, frozenset[int]] = {}
        self.hosts: set[str] = set()
        self.host_jobs: dict[str, frozenset[str]] = {}  # host -> jobs with a rank on it
        self.loaded_at = 0.0

    def refresh(self, rt: Runtime) -> None:
        with rt.sessions() as session:
            specs = jobs_repo.ranks(session)
            self.jobs = {name: frozenset(int(r["rank"]) for r in spec.get("ranks", []) if isinstance(r, dict))
                         for name, spec in specs.items()}
            self.hosts = set(hosts_repo.names(session))
        host_jobs: dict[str, set[str]] = {}
        for name, spec in specs.items():
            for r in spec.get("ranks", []):
                if isinstance(r, dict) and isinstance(r.get("host"), str):
                    host_jobs.setdefault(r["host"], set()).add(name)
        self.host_jobs = {h: frozenset(j) for h, j in host_jobs.items()}
        self.loaded_at = time.monotonic()

    def stale(self) -> bool:
        return time.monotonic() - self.loaded_at > JOB_CACHE_S


class Telemetry:
    """One per process: the ingest queue (or the inbox), the diagnoser and the detector worker."""

    def __init__(self, rt: Runtime) -> None:
        s = rt.settings
        self.rt = rt
        self.config = DiagnosisConfig(hang_timeout_s=s.hang_timeout_s, slow_factor=s.slow_factor,
                                      slow_window=s.slow_window, window_collectives=max(32, 3 * s.slow_window),
                                      quiet_window_s=s.alarm_quiet_s, telemetry_gap_s=s.telemetry_gap_s,
                                      link_report_hold_s=s.link_report_hold_s)
        self.diagnoser = Diagnoser(self.config)
        self._queue: deque[tuple[int, str, Sequence[CollectiveRecord]]] = deque()
        self._queued = 0
        self._index = _JobIndex()
        self._index_lock = threading.Lock()
        self._routes: dict[str, tuple[tuple[int, int], JobRoutes]] = {}
        self._route_ids: dict[str, int] = {}  # job -> the id of the job its cached routes are of
        self._unsaved: list[AlarmEvent] = []
        self._seen: set[str] = set()  # jobs whose telemetry the diagnoser holds
        self._hosts_written: dict[str, tuple[str, int]] = {}  # host -> (state, last heard)
        self._hosts_flushed = 0.0
        self._step_lock = threading.Lock()
        self.worker = PeriodicWorker("detectors", s.detector_interval_s, self.step)
        # Sharded across replicas (PostgreSQL): the worker runs in every replica, on its shards.
        self.sharded = rt.engine.dialect.name == "postgresql" and s.telemetry_shards > 0
        self.shards = ShardOwnership(rt, s.telemetry_shards) if self.sharded else None
        self._replay_us = int(s.telemetry_replay_s * 1_000_000)
        self._mark_us = 0  # the inbox is read from here (minus READ_LAG_US) on
        self._read: dict[int, tuple[int, int]] = {}  # inbox row id -> (arrival, shard), within the re-read lag
        self._pruned = 0.0
        if self.sharded:
            rt.checks.append(self._check_lines)

    def ingest(self, host: str, records: Sequence[RecordIn]) -> int:
        """Check a batch and queue it whole; raises Invalid naming the field, nothing queued.
        An empty batch is the host agent's heartbeat. `records`: validated API records (their
        host is `host`) or domain records; sharded, they go to the inbox as they are (the
        shards' owners build the domain records), else into the in-memory queue as domain
        records."""
        if not self.sharded and not self.rt.leading:
            REFUSED.labels("not_leader").inc()
            raise Unavailable("this controller process does not run the detectors; retry (another process leads)",
                              {"retry": True})
        problems = self._check(host, records)
        if problems:
            REFUSED.labels("invalid").inc()
            raise Invalid(problems)
        if self.sharded:
            self._append(host, records)
            if records:
                INGESTED.inc(len(records))
            else:
                HEARTBEATS.inc()
            return len(records)
        if self._queued + len(records) > MAX_QUEUED_RECORDS:
            REFUSED.labels("overloaded").inc()
            raise Unavailable("the detectors are behind; retry the batch later")
        self._queue.append((now_us(), host, telemetry_codec.records(records, host)))
        self._queued += len(records)
        if records:
            INGESTED.inc(len(records))
        else:
            HEARTBEATS.inc()
        return len(records)

    def _append(self, host: str, records: Sequence[RecordIn]) -> None:
        """One inbox row per shard of the batch's jobs; a heartbeat row for each other shard
        that follows this host (its own, for its telemetry state; its jobs', whose hang
        detectors tell a silent agent from a hung rank). One transaction: all or nothing."""
        count = self.rt.settings.telemetry_shards
        parts: dict[int, list[RecordIn]] = {}
        for r in records:
            parts.setdefault(job_shard(r.job, count), []).append(r)
        arrival = now_us()
        rows = [(shard, arrival, host, len(part), telemetry_codec.encode(part, host)) for shard, part in parts.items()]
        follow = {host_shard(host, count)} | {job_shard(j, count) for j in self._index.host_jobs.get(host, ())}
        rows += [(shard, arrival, host, 0, "[]") for shard in sorted(follow - parts.keys())]
        with transaction(self.rt.sessions) as session:
            telemetry_inbox_repo.append(session, rows)

    def _check(self, host: str, records: Sequence[RecordIn]) -> list[Problem]:
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
        """Drain the queue (or this replica's shards of the inbox), run the detectors at now,
        store what they conclude."""
        with self._step_lock, DETECTOR_SECONDS.time():
            if self.sharded:
                self._pull()
            self._step()

    def _feed(self, arrival: int, host: str, records: Sequence[CollectiveRecord]) -> None:
        if records:
            self.diagnoser.ingest(records, arrival)
            self._seen.update(r.job for r in records)
            DETECTED.inc(len(records))
        else:
            self.diagnoser.heard_from(host, arrival)

    def _pull(self) -> None:
        """Rebalance the shards, forget the jobs of shards lost, replay the shards gained,
        then read what arrived for this replica's shards since the last read."""
        assert self.shards is not None
        count = self.rt.settings.telemetry_shards
        try:
            gained, lost = self.shards.poll()
        except Exception:
            self._forget_shards(set(range(count)))
            raise
        self._forget_shards(lost)
        now = now_us()
        if gained:
            self._read_inbox(sorted(gained), now - self._replay_us)
        if not self._mark_us:
            self._mark_us = now - self._replay_us
        self._mark_us = max(self._mark_us, self._read_inbox(sorted(self.shards.owned), self._mark_us - READ_LAG_US))
        floor = self._mark_us - 2 * READ_LAG_US
        self._read = {i: seen for i, seen in self._read.items() if seen[0] >= floor}
        if time.monotonic() - self._pruned >= PRUNE_EVERY_S and self.shards.owned:
            with transaction(self.rt.sessions) as session:
                telemetry_inbox_repo.prune(session, sorted(self.shards.owned), now - self._replay_us)
            self._pruned = time.monotonic()

    def _read_inbox(self, shards: list[int], after_us: int) -> int:
        """Feed the detectors the rows of `shards` that arrived after `after_us` and were not
        read yet; returns the latest arrival seen (`after_us` if none)."""
        latest = after_us
        while shards:
            with self.rt.sessions() as session:
                rows = telemetry_inbox_repo.since(session, shards, after_us, READ_PAGE)
            fresh = 0
            for row_id, shard, arrival, host, _n, body in rows:
                latest = max(latest, arrival)
                if row_id in self._read:
                    continue
                self._read[row_id] = (arrival, shard)
                fresh += 1
                self._feed(arrival, host, telemetry_codec.decode(body))
            if len(rows) < READ_PAGE or not fresh:
                break
            after_us = rows[-1][2] - 1
        return latest

    def _forget_shards(self, shards: set[int]) -> None:
        """Another replica owns these shards now: drop their jobs without an event (their
        open alarms stay open; the new owner adopts them when it sees them again)."""
        if not shards:
            return
        count = self.rt.settings.telemetry_shards
        # Rows of these shards read before count as unread, should the shards come back.
        self._read = {i: seen for i, seen in self._read.items() if seen[1] not in shards}
        for job in [j for j in self._seen if job_shard(j, count) in shards]:
            self.diagnoser.drop_job(job)
            self._seen.discard(job)
            self._routes.pop(job, None)
            self._route_ids.pop(job, None)

    def _check_lines(self) -> dict[str, str]:
        assert self.shards is not None
        return {"telemetry": f"sharded: this replica owns {len(self.shards.owned)} of {self.shards.count} shards "
                             f"({self.shards.replicas} replicas)",
                "worker:detectors": self.worker.status()}

    def start(self) -> None:
        """Sharded: the detectors run in every replica, from start-up (not only the leader's)."""
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
        with self._step_lock:
            if self.shards is not None:
                self.shards.drop()  # release the shards at once: the others take them at their next poll

    def _step(self) -> None:
        while self._queue:
            arrival, host, records = self._queue.popleft()
            self._queued -= len(records)
            self._feed(arrival, host, records)
        now = now_us()
        routes, gone, pauses, (down, reporting) = self._load(now)
        events = [ev for job in gone for ev in self.diagnoser.forget_job(job, now)]
        events += self.diagnoser.evaluate(routes, now, pauses, down, reporting)
        # The diagnoser has moved on once it returns events: keep them until they are stored,
        # or an outage of the database would lose an alarm (and its isolation) for good.
        self._unsaved += events
        alarms.record(self.rt, self._unsaved)
        self._unsaved = []
        self._write_hosts(now)
        WINDOW_RECORDS.set(self.diagnoser.record_count())
        QUEUED.set(self._queued)

    def _load(self, now: int) -> tuple[dict[str, JobRoutes], list[str], dict[str, list[tuple[int, int]]],
                                       tuple[dict[str, str], bool]]:
        """Planned routes of the jobs that sent telemetry, rebuilt when a job's version or the
        fabric moves; the jobs that no longer exist; the pauses jobs announced; the links
        reported down (by an operator, or by their switches' ifOperStatus) and whether
        switches report their ports' state at all. Jobs without
        telemetry cost one row each here, so a re-plan of a big job that nobody monitors yet
        does not reload its flows."""
        with self.rt.sessions() as session:
            versions = jobs_repo.versions(session)
            current = self.rt.fabric_cache.current(session)
            revision = -1 if current is None else current[0]
            ends: dict[str, tuple[str, str]] | None = None
            out: dict[str, JobRoutes] = {}
            for job in sorted(self._seen & versions.keys()):
                cached = self._routes.get(job)
                if cached is None or cached[0] != (versions[job], revision):
                    job_id, spec = jobs_repo.id_and_spec(session, job) or (0, {})
                    flows = flows_repo.planned_routes(session, job_id)
                    if ends is None:
                        ends = {} if current is None else {lk.name: (lk.a, lk.b) for lk in current[1].links}
                    built = _routes(job, spec, flows, ends)
                    if cached is not None and self._route_ids.get(job) == job_id and versions[job] >= cached[0][0]:
                        built = with_earlier_sports(built, cached[1])
                    self._route_ids[job] = job_id
                    cached = ((versions[job], revision), built)
                    self._routes[job] = cached
                    self.diagnoser.set_job_settings(job, job_diagnosis(spec))
                out[job] = cached[1]
            pauses = pauses_repo.recent(session, now - PAUSE_LOOKBACK_US)
            fresh_s = self.rt.settings.link_sample_fresh_s
            down = {} if current is None else links_reported_down(session, current[1], now, fresh_s)
            reporting = oper_reported_since(session, now - int(fresh_s * 1e6))
        gone = sorted(self._seen - versions.keys())
        for job in gone:
            self._seen.discard(job)
            self._routes.pop(job, None)
            self._route_ids.pop(job, None)
        return out, gone, pauses, (down, reporting)

    def _write_hosts(self, now: int) -> None:
        """Persist hosts' telemetry states: changes at once, last-heard times every few s
        (sharded: the hosts whose own shard this replica owns)."""
        due = time.monotonic() - self._hosts_flushed >= HOST_FLUSH_S
        changes = []
        mine = None if self.shards is None else self.shards.owned
        count = self.rt.settings.telemetry_shards
        for h in self.diagnoser.hosts(now):
            if mine is not None and host_shard(h.host, count) not in mine:
                continue
            state = "reporting" if h.gap_since_us is None else "gap"
            written = self._hosts_written.get(h.host)
            if written is None or written[0] != state or (due and written[1] != h.last_heard_us):
                changes.append((h.host, state, h.last_heard_us, h.gap_since_us))
        if not changes:
            return
        with transaction(self.rt.sessions) as session:
            for host, state, heard, gap in changes:
                hosts_repo.put_telemetry(session, host, state, heard, gap, now)
        for host, state, heard, _ in changes:
            self._hosts_written[host] = (state, heard)
        if due:
            self._hosts_flushed = time.monotonic()

    def rate_matrix(self, job: str) -> dict[str, Any]:
        """The job's rate matrices as the detectors hold them (the leader, or the replica
        that owns the job's shard)."""
        if self.shards is not None:
            shard = job_shard(job, self.shards.count)
            if shard not in self.shards.owned:
                owner = self.shards.owners().get(shard)
                raise Unavailable(f"job {job!r}'s telemetry shard {shard} is owned by replica {owner or '(none yet)'}; "
                                  "ask it", {"retry": True, "shard": shard, "owner": owner})
        elif not self.rt.leading:
            raise Unavailable("this controller process does not run the detectors; ask the leader",
                              {"retry": True})
        with self._step_lock:
            comms = self.diagnoser.rate_matrix(job)
        if not comms:
            raise NotFound(f"no telemetry of job {job!r} in the detectors' windows", {"job": job})
        return {"job": job, "comms": comms}


def _routes(job: str, spec: dict[str, object], flows: Iterable[tuple[Any, ...]],
            ends: dict[str, tuple[str, str]]) -> JobRoutes:
    ranks = spec.get("ranks", [])
    rank_hosts = {int(r["rank"]): str(r["host"]) for r in ranks if isinstance(r, dict)} if isinstance(ranks, list) else {}
    connections: dict[tuple[int, int], list[PlannedFlow]] = {}
    for src_rank, dst_rank, src_host, src_nic, src_port, dst_host, dst_nic, dst_port, path, links, sport in flows:
        if path is None or links is None:
            continue
        route, crossed = tuple(path), tuple(links)
        connections.setdefault((src_rank, dst_rank), []).append(PlannedFlow(
            src_host=src_host, src_port=f"{src_host}:{src_nic}:{src_port}", dst_host=dst_host,
            dst_port=f"{dst_host}:{dst_nic}:{dst_port}", path=route, links=crossed, sport=sport,
            directions=link_directions(route, crossed, ends)))
    return JobRoutes(job, rank_hosts, {k: tuple(v) for k, v in sorted(connections.items())})


MAX_FLOWS_PER_CONNECTION = 64


def with_earlier_sports(new: JobRoutes, old: JobRoutes) -> JobRoutes:
    """A re-plan of a running job (the rebalancer moving a flow to another path) gives the flow
    a new source port, but a live connection's sockets keep the ports they opened with (the
    shim takes only the weights from the next message): its telemetry still reports the old
    ports, on the old paths. So the flows of the earlier plan whose ports the new one no longer
    has stay in the routes C4D localises with, after the current ones, matched by port as the
    telemetry names them (capped per connection), each on the path it was planned on (after a
    link state change the kernel may have re-hashed it, but a flow stuck since before the
    change is stuck there, and a port no plan has would match nothing at all)."""
    merged: dict[tuple[int, int], tuple[PlannedFlow, ...]] = dict(new.connections)
    for conn, flows in old.connections.items():
        current = merged.get(conn, ())
        have = {f.sport for f in current}
        stale = [f for f in flows if f.sport is not None and f.sport not in have]
        if stale:
            merged[conn] = (*current, *stale)[:MAX_FLOWS_PER_CONNECTION]
    return JobRoutes(new.job, new.rank_hosts, dict(sorted(merged.items())))
