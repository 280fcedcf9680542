"""Link-change recovery for live connections of the socket transport (probed mode, TCP): see
`te.failover` for why and what. This service wires it in:

- a link-change hook that runs *before* the planner's re-plan, inside the PATCH's transaction:
  it notes, per planned job with a flow on a port pair the change re-hashes
  (`te.failover.stale_pairs`), the source port each flow has now (its live socket's, which the
  re-plan may change for the next connection but cannot change for this one), and, once the
  PATCH commits, marks those address pairs stale (`Runtime.probe_stale`): the agents' next
  `GET /v1/probes/requests` asks for them again (`services.probes`);
- the leader's `failover` worker (every 0.5 s and on every wake, which a probe report
  triggers): when every stale pair of a job has a report newer than the change, it re-weights
  the job (`te.failover.reweight`: live ports kept, paths from the fresh probes, weights from
  the LP) and stores the plan through the planner's `write` (validator, version bump,
  `job.replanned` with reason `link L down: re-probed`). The node agent pushes the new weights
  to the live connections (req_id 0), which the shim applies from the next message.

Which ports are live: a job's connections are opened on the plan it had when it started;
later re-plans (the rebalancer's moves, a re-optimisation, this PATCH's) reach only the next
connection. So the worker notes each job's ports when it first sees it planned, and the hook
takes those over the current ones. (The shim's telemetry names each socket's port; reading
the live ports from it would be exact: not done yet.)

Memory (the leader's): the first and captured live ports per job and the jobs waiting for probes. With
several controller processes (PostgreSQL) a link change served by a follower is recorded in
that follower's memory, which no failover worker reads: that job is left as the re-plan made
it, as after a leader change (known limit; the stale pairs and waiting jobs belong in a table
to fix it). A new leader forgets them: the stale pairs are then re-probed only when their entries expire
(`C4_PROBE_TTL_S`), and a live connection keeps the re-plan's weights. A job waits at most
`WAIT_S` for its probes; then it is left as the re-plan made it (logged).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from prometheus_client import Counter as Metric
from sqlalchemy.orm import Session

from controller.domain.fabric import Fabric, HashingMode, LinkState
from controller.domain.jobs import FlowKey, JobStatus
from controller.services.clock import now_us
from controller.services.planning import REFRESH_DELAY_S, Planner, summary_from_document
from controller.services.runtime import Runtime
from controller.services.workers import PeriodicWorker
from controller.store import fabric_repo, jobs_repo
from controller.store.jobs_repo import JobState
from controller.te import planner as te_planner
from controller.te.failover import Reweighted, reweight, stale_pairs
from controller.te.instance import count_by_nic, demands_gbps, directed_capacity_gbps
from controller.te.loads import planned_loads, totals
from controller.te.probes import ProbeBook
from controller.te.solution import Status
from controller.te.validate import plan_problems
from controller.topology.build import with_link_state
from controller.topology.graph import FabricView

log = logging.getLogger(__name__)

WAIT_S = 30.0  # a job waits this long for fresh probes of its stale pairs
INTERVAL_S = 0.5
REWEIGHTS = Metric("c4_failover_reweights_total", "Jobs re-weighted after a link change once re-probed, per outcome",
                   ["outcome"])


@dataclass
class _Pending:
    job_id: int
    since_us: int
    reason: str
    pairs: set[tuple[str, str]] = field(default_factory=set)  # address pairs waiting for probes
    deadline: float = 0.0  # time.monotonic()


def _live(fabric: Fabric) -> bool:
    """Whether connections keep the source port they were opened on: probed mode over TCP (a
    socket per flow). RoCE: a QP's UDP source port can be changed by the interposer; nothing
    live to keep."""
    h = fabric.hashing
    return h.mode == HashingMode.PROBED and h.protocol == "tcp"


class Failover:
    def __init__(self, rt: Runtime, planner: Planner) -> None:
        self.rt, self.planner = rt, planner
        self.live_ports: dict[str, tuple[int, dict[FlowKey, int]]] = {}  # job -> (job id, key -> port)
        self.pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self.worker = PeriodicWorker("failover", INTERVAL_S, self.step)
        self.last: dict[str, Reweighted] = {}  # the last re-weight per job (tests, logs)
        # job -> (job id, version, key -> port) of the first plan this leader saw it with: the
        # ports its connections were opened on (see `before_replan`)
        self.first_ports: dict[str, tuple[int, int, dict[FlowKey, int]]] = {}

    # --- the link-change hook (before the planner's re-plan, in the PATCH's transaction) ----

    def before_replan(self, session: Session, fabric: Fabric, link: str, state: LinkState) -> int:
        if not _live(fabric):
            return 0
        view_up = FabricView(with_link_state(fabric, link, LinkState.UP))
        jobs = self.planner.load(session)
        now = now_us()
        captured: dict[str, tuple[int, dict[FlowKey, int], set[tuple[str, str]]]] = {}
        for name, j in jobs.items():
            if j.status != JobStatus.PLANNED.value:
                continue
            stale = stale_pairs(view_up, link, {(a.src_node, a.dst_node) for a in j.assignments.values()})
            if not stale:
                continue
            addrs = {(view_up.ports[s].address, view_up.ports[d].address) for s, d in stale}
            ports = {k: a.udp_sport for k, a in j.assignments.items()}
            first = self.first_ports.get(name)
            if first is not None and first[0] == j.job_id:
                # A re-plan since (the rebalancer's moves, a re-optimisation) gave new ports to the
                # next connection only: the open sockets still have the first plan's.
                ports = {**ports, **{k: v for k, v in first[2].items() if k in ports}}
            captured[name] = (j.job_id, ports, addrs)
        if not captured:
            return 0
        reason = f"link {link} {state.value}: re-probed"

        def commit() -> None:
            with self._lock:
                for name, (job_id, ports, addrs) in captured.items():
                    old = self.live_ports.get(name)
                    if old is not None and old[0] == job_id:  # the sockets keep their first ports
                        ports = {**ports, **old[1]}
                    self.live_ports[name] = (job_id, ports)
                    p = self.pending.get(name)
                    if p is None or p.job_id != job_id:
                        p = self.pending[name] = _Pending(job_id, now, reason)
                    p.pairs |= addrs
                    p.since_us, p.reason, p.deadline = now, reason, time.monotonic() + WAIT_S
                    for a in addrs:
                        self.rt.probe_stale[a] = max(now, self.rt.probe_stale.get(a, 0))
            log.info("link %s %s: %d jobs wait for fresh probes of %d pairs", link, state.value, len(captured),
                     len({a for _, _, addrs in captured.values() for a in addrs}))
            self.worker.wake()

        self.planner.memory.on_commit(session, commit)
        return 0

    # --- the worker -------------------------------------------------------------------------

    def remember_first_ports(self) -> None:
        """Note the ports of every planned job this leader has not seen planned before; on a
        fabric whose connections' ports are not live (not probed TCP: `before_replan` keeps
        none) nothing, and no read of the active jobs (issue 18: every 0.5 s it was a
        `Planner.load` of every one)."""
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.current(session)
            if got is None or not _live(got[1]):
                return
            jobs = self.planner.load(session)
        with self._lock:
            for name in [n for n, (jid, _, _) in self.first_ports.items() if n not in jobs or jobs[n].job_id != jid]:
                del self.first_ports[name]
            for name, j in jobs.items():
                if j.status == JobStatus.PLANNED.value and name not in self.first_ports:
                    self.first_ports[name] = (j.job_id, j.version, {k: a.udp_sport for k, a in j.assignments.items()})

    def step(self) -> int:
        """Note new jobs' first ports; re-weight the jobs whose stale pairs all have fresh
        probes; returns how many were stored."""
        self.remember_first_ports()
        with self._lock:
            if not self.pending:
                return 0
            mono = time.monotonic()
            for name, p in list(self.pending.items()):
                if mono > p.deadline:
                    log.warning("job %s: no fresh probes of %d pairs within %.0f s after %s; left as re-planned",
                                name, len(p.pairs & self.rt.probe_stale.keys()), WAIT_S, p.reason)
                    REWEIGHTS.labels("timed_out").inc()
                    del self.pending[name]
            stale = self.rt.probe_stale.keys()
            ready = {n: p for n, p in self.pending.items() if not (p.pairs & stale)}
            if not ready:
                return 0
            return self._reweight(ready)

    def _reweight(self, ready: dict[str, _Pending]) -> int:
        rt = self.rt
        with rt.sessions() as session:
            got = rt.fabric_cache.current(session)
            if got is None:
                return 0
            revision, fabric, view = got
            jobs = self.planner.load(session)
            cands = self.planner.candidates(session, fabric, revision)
        book = cands.ports
        if not isinstance(book, ProbeBook):
            self.pending.clear()
            return 0
        for name in [n for n, (jid, _) in self.live_ports.items() if n not in jobs or jobs[n].job_id != jid]:
            del self.live_ports[name]
        demand = demands_gbps(fabric, count_by_nic(f for j in jobs.values() for f in j.flows))
        capacity = directed_capacity_gbps(fabric)
        planned = {n: j for n, j in jobs.items() if j.status == JobStatus.PLANNED.value}
        per_job = planned_loads(view, {n: [(src[k], a.path) for k, a in j.assignments.items() if k in src]
                                       for n, j in planned.items() for src in [{f.key: f.src for f in j.flows}]},
                                demand)
        plans: dict[str, Reweighted] = {}
        for name, p in ready.items():
            job = planned.get(name)
            if job is None or job.job_id != p.job_id or name not in self.live_ports:
                del self.pending[name]
                continue
            background = {d: x.gbps for d, x in totals({n: v for n, v in per_job.items() if n != name}).items()}
            res = reweight(view, job.flows, job.assignments, self.live_ports[name][1], book, demand, background,
                           capacity)
            self.last[name] = res
            problems = [] if res.unknown else plan_problems(view, job.flows, res.assignments, book.seen())
            if problems:  # never fail a running job over a re-weight: leave it as re-planned, say why
                log.warning("job %s: re-weight after %s not valid (%d problems: %s); left as re-planned", name,
                            p.reason, len(problems), "; ".join(problems[:4]))
                REWEIGHTS.labels("invalid").inc()
                del self.pending[name]
                continue
            if res.unknown:
                log.warning("job %s: %d flows' live ports have no fresh path (first %s); left as re-planned",
                            name, len(res.unknown), res.unknown[0])
                REWEIGHTS.labels("unknown_ports").inc()
                del self.pending[name]
                continue
            plans[name] = res
        if not plans:
            return 0
        read = {n: JobState(j.job_id, j.version, j.status) for n, j in jobs.items()}
        with rt.sessions() as session, session.begin():
            if not fabric_repo.claim_revision(session, revision) or jobs_repo.active_states(session) != read:
                return 0  # something changed meanwhile: the next round tries again
            for name, res in sorted(plans.items()):
                job = jobs[name]
                row = jobs_repo.by_id(session, job.job_id)
                if row is None or not row.plan:
                    continue
                moved = sum(1 for k, a in res.assignments.items() if job.assignments[k].path != a.path)
                summary = summary_from_document(row.plan)
                plan = te_planner.JobPlan(name, Status.FEASIBLE, res.assignments, summary, None, moved)
                self.planner.write(session, name, job, plan, cands, self.pending[name].reason)
                outcome = "stored" if row.status == JobStatus.PLANNED.value else "refused"
                REWEIGHTS.labels(outcome).inc()
                log.info("job %s: %s: %d flows changed (live ports kept), max utilization %.2f (%s)", name,
                         self.pending[name].reason, res.changed, res.max_utilization, outcome)
            # Loads moved between link directions: bounds proven on the old background (stored,
            # or being computed by the planner now) show their pigeonhole floor until the
            # refresh proves them again (an epoch drop, as in the rebalancer).
            jobs_repo.advance_epoch(session, 0.0, 1)
            due = time.monotonic() + REFRESH_DELAY_S
            names = set(plans)
            self.planner.memory.on_commit(session, lambda: self.planner.memory.schedule_refresh(names, due))
        for name in plans:
            del self.pending[name]
        rt.wake_workers()
        return len(plans)


def install(rt: Runtime, planner: Planner) -> Failover:
    """Register the `failover` worker and its link-change hook, first (before the planner's)."""
    failover = Failover(rt, planner)
    rt.workers[:] = [w for w in rt.workers if w.name != "failover"] + [failover.worker]
    rt.on_link_change[:] = [failover.before_replan] + [h for h in rt.on_link_change
                                                       if not isinstance(getattr(h, "__self__", None), Failover)]
    return failover
