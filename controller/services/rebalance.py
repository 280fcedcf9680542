"""The rebalancing service: acts on the congestion detector's output, run by the leader's
`rebalance` worker (every `C4_REBALANCE_INTERVAL_S`, and at once when an ingest saw a
direction enter congestion). The decisions are the pure core's (`te.rebalance`); this module
reads the state, runs them, and stores the new plans through the planner's `write` (the
solver-free validator, version bump, `job.replanned` with reason `congestion`), in a
transaction that first claims the fabric's revision (so it serializes with link changes,
plans and summary refreshes) and checks that no job changed since it read them.

What it keeps in the leader's memory: the episodes (one per congested direction: when the
weights step and the moves step acted, which connections it lowered), the per-flow
hold-downs of moved flows (`SwitchTelemetry.holds`), of lowered weights (`capped`: a weight
the rebalancer lowered does not rise again before its hold-down ends, `te.rebalance`) and of
link directions whose load it lowered (`held_directions`: no load goes back on them
meanwhile). A new leader starts with none: it may lower weights once more on a direction
still congested, and flows moved or weights lowered by the old leader are no longer held (the
planner's re-optimisation could then undo them: see README, Decisions).

While any hold lasts or an episode is live, the planner's periodic re-optimisation waits and
a new job's plan moves no other job's flows (`Planner.reopt_paused`): neither knows the
measured background, and either could move flows back onto the hot link.

Every plan it changes shows what it answered: `plan.congestion` (kept by summary refreshes,
gone when the planner writes a new plan for another reason), a list (newest last, at most
`MAX_ANSWERED`) of `{link, direction, step, at_us, since_us, measured_gbps, utilization,
planned_gbps, background_gbps, ecn_marked_fraction, pfc_pauses_per_s, degraded, reason}`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import Counter as Metric
from prometheus_client import Gauge
from sqlalchemy.orm import Session

from controller.domain.jobs import JobStatus, PlanSummary
from controller.services.clock import now_us
from controller.services.planner_memory import Loaded
from controller.services.planning import REFRESH_DELAY_S, Planner, summary_from_document
from controller.services.runtime import Runtime
from controller.services.switch_telemetry import SwitchTelemetry, congestion_config
from controller.services.workers import PeriodicWorker
from controller.settings import Settings
from controller.store import fabric_repo, jobs_repo
from controller.store import link_telemetry_repo as repo
from controller.store.jobs_repo import JobState
from controller.te import planner as te_planner
from controller.te.candidates import Candidates, DirectedLink, Nic
from controller.te.carry import bounds_after_jobs_change
from controller.te.congestion import CongestedDirection, DirectionState, Transition, congested
from controller.te.instance import count_by_nic, demands_gbps
from controller.te.loads import planned_loads, totals
from controller.te.rebalance import (
    Action,
    Decision,
    Episode,
    JobInput,
    LatestSample,
    RebalanceConfig,
    WeightHold,
    decide,
)
from controller.te.solution import Status
from controller.topology.graph import FabricView

log = logging.getLogger(__name__)

REASON = "congestion"
MAX_ANSWERED = 8
ACTIONS = Metric("c4_rebalance_actions_total", "Rebalancing actions on a job, per step (weights, moves, restored)",
                 ["step"])
FLOWS = Metric("c4_rebalance_flows_total", "Flows whose weight or path the rebalancer changed, per step", ["step"])
HELD = Gauge("c4_rebalance_held_flows", "Flows the rebalancer moved that are in their hold-down now")
CAPPED = Gauge("c4_rebalance_capped_flows",
               "Flows whose weight the rebalancer lowered that are in their hold-down now (the weight does not rise)")


def rebalance_config(s: Settings) -> RebalanceConfig:
    c = congestion_config(s)
    return RebalanceConfig(weight_cut=s.rebalance_weight_cut, target_utilization=s.rebalance_target_utilization,
                           headroom=s.rebalance_headroom, degraded_fraction=s.rebalance_degraded_fraction,
                           hold_down_s=c.hold_down_s, ecn_leave_fraction=c.ecn_leave_fraction,
                           pfc_leave_per_s=c.pfc_leave_per_s, min_pkts_per_s=c.min_pkts_per_s,
                           ecn_enter_fraction=c.ecn_enter_fraction, pfc_enter_per_s=c.pfc_enter_per_s)


def job_rebalances(spec: Mapping[str, object]) -> bool:
    """A job's own switch (`rebalance` in its spec; absent: on)."""
    return spec.get("rebalance", True) is not False


@dataclass
class RoundResult:
    """What one round saw and did (the bench and the tests read it)."""

    t_us: int
    congested: list[CongestedDirection] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    stored: bool = True


class Rebalancer:
    def __init__(self, rt: Runtime, planner: Planner, telemetry: SwitchTelemetry) -> None:
        self.rt = rt
        self.planner = planner
        self.holds = telemetry.holds
        self.config = rebalance_config(rt.settings)
        self.congestion = congestion_config(rt.settings)
        self.episodes: dict[DirectedLink, Episode] = {}
        self.capped: dict[Hashable, WeightHold] = {}
        self.held_directions: dict[DirectedLink, int] = {}  # load lowered there -> hold end
        self._lock = threading.Lock()
        self.worker = PeriodicWorker("rebalance", rt.settings.rebalance_interval_s, self.step)
        planner.reopt_paused = self.busy

    def busy(self) -> bool:
        """Whether the planner's re-optimisation should wait (holds or, with rebalancing on, an
        episode live: the re-optimisation would undo what the episode did)."""
        live = bool(self.episodes) and self.rt.settings.rebalance_enabled
        now = now_us()
        return (live or bool(self.holds.active(now)) or any(h.until_us > now for h in list(self.capped.values()))
                or any(t > now for t in list(self.held_directions.values())))

    def step(self, now: int | None = None) -> RoundResult:
        with self._lock:
            return self._step(now_us() if now is None else now)

    def _step(self, now: int) -> RoundResult:
        rt = self.rt
        self.capped = {k: h for k, h in self.capped.items() if h.until_us > now}
        self.held_directions = {d: t for d, t in self.held_directions.items() if t > now}
        CAPPED.set(len(self.capped))
        with rt.sessions() as session:
            got = rt.fabric_cache.current(session)
            if got is None:
                return RoundResult(now)
            revision, fabric, view = got
            docs = repo.direction_states(session, congested_only=True)
            if not docs and not self.episodes:
                HELD.set(len(self.holds.active(now)))
                return RoundResult(now)
            jobs = self.planner.load(session)
            if not any(j.status == JobStatus.PLANNED.value for j in jobs.values()) and not self.episodes:
                HELD.set(len(self.holds.active(now)))
                return RoundResult(now)  # congestion, but no plan to change (and nothing to undo)
            cands = self.planner.candidates(session, fabric, revision)
            specs = jobs_repo.active_specs(session)
            states = [DirectionState.from_doc(d) for d in docs.values()]
            demand = demands_gbps(fabric, count_by_nic(f for j in jobs.values() for f in j.flows))
            planned = {n: j for n, j in jobs.items() if j.status == JobStatus.PLANNED.value}
            per_job = planned_loads(view, {n: [(src[k], a.path) for k, a in j.assignments.items() if k in src]
                                           for n, j in planned.items()
                                           for src in [{f.key: f.src for f in j.flows}]}, demand)
            load = {d: x.gbps for d, x in totals(per_job).items()}
            hot = congested(states, {link.name: link.capacity_gbps for link in fabric.links}, load, now,
                            self.congestion)
            latest: dict[DirectedLink, LatestSample] = {}
            for c in hot:
                row = repo.latest_sample(session, c.link, c.direction)
                if row is not None:
                    raw = row.raw
                    pkts, marks = raw.get("pkts_per_s"), raw.get("ecn_marks_per_s")
                    fraction = (min(1.0, marks / pkts) if marks is not None and pkts
                                and pkts >= self.config.min_pkts_per_s else None)
                    rate = raw.get("bytes_per_s")
                    latest[(c.link, c.direction)] = LatestSample(
                        row.t_us, fraction, max((float(v) for v in (raw.get("pfc_pauses_per_s") or {}).values()),
                                                default=0.0),
                        None if rate is None else float(rate) * 8 / 1e9)
        inputs = {n: JobInput(tuple(j.flows), j.assignments,
                              rt.settings.rebalance_enabled and job_rebalances(specs.get(n, (0, {}))[1]))
                  for n, j in planned.items()}
        held = {h.key: h.until_us for h in self.holds.active(now)}
        decision = decide(view, cands, inputs, demand, hot, latest, self.episodes, held, now, self.config,
                          rt.settings.rebalance_enabled, self.capped, self.held_directions)
        result = RoundResult(now, hot, decision.actions)
        if decision.plans:
            read = {n: JobState(j.job_id, j.version, j.status) for n, j in jobs.items()}
            if not self._store(decision, revision, read, jobs, cands, view, now):
                result.stored = False
                return result  # something changed meanwhile: the next round decides again
        self.episodes = decision.episodes
        self.capped = {**self.capped, **decision.lowered}
        self.held_directions = {**self.held_directions, **decision.lowered_directions}
        CAPPED.set(len(self.capped))
        for key, (until, reason, link, direction) in decision.holds.items():
            self.holds.hold(key, now, (until - now) / 1e6, reason, link, direction)
        for a in decision.actions:
            ACTIONS.labels(a.step).inc()
            FLOWS.labels(a.step).inc(a.flows)
            log.info("rebalance: job %s, %s on %s %s: %d flows", a.job, a.step, a.link, a.direction, a.flows)
        HELD.set(len(self.holds.active(now)))
        return result

    def _store(self, decision: Decision, revision: int, read: Mapping[str, JobState],
               jobs: Mapping[str, Loaded], cands: Candidates, view: FabricView, now: int) -> bool:
        planner = self.planner
        with self.rt.sessions() as session, session.begin():
            if not fabric_repo.claim_revision(session, revision) or jobs_repo.active_states(session) != read:
                return False
            answered: dict[str, list[dict[str, object]]] = defaultdict(list)
            for a in decision.actions:
                answered[a.job].append(dict(a.congestion))
            gone: dict[str, set[DirectedLink]] = {}
            for name, assignments in sorted(decision.plans.items()):
                job = jobs[name]
                old = job.assignments
                row = jobs_repo.by_id(session, job.job_id)
                if row is None or not row.plan:
                    continue  # (cannot be: the states were checked under the fabric lock)
                moved = [k for k, a in assignments.items() if old[k].path != a.path]
                if moved:
                    gone[name] = {d for k in moved for d in view.directed_links_of(old[k].path)}
                summary = _summary(row.plan, len(moved))
                history = [*list(row.plan.get("congestion") or []), *answered.get(name, [])]
                plan = te_planner.JobPlan(name, Status.FEASIBLE, assignments, summary, None, len(moved))
                planner.write(session, name, job, plan, cands, REASON)
                if row.status != JobStatus.PLANNED.value:
                    continue  # refused by the validator (a bug): the job failed visibly, counted
                row.plan = {**(row.plan or {}), "congestion": history[-MAX_ANSWERED:]}
            if gone:
                self._lower_bounds(session, view, jobs, gone)
            if decision.plans:
                # Loads moved between link directions (weights or paths): a bound proven on the
                # old background, stored or being computed by the planner right now, may be too
                # high. A drop in the bound epoch shows every bound proven before it at its
                # pigeonhole floor until the refresh proves it again (te.carry.shown_bound).
                jobs_repo.advance_epoch(session, 0.0, 1)
            names = {n for n, j in jobs.items() if j.status == JobStatus.PLANNED.value}
            due = time.monotonic() + REFRESH_DELAY_S
            planner.memory.on_commit(session, lambda: planner.memory.schedule_refresh(names, due))
        self.rt.wake_workers()
        return True

    def _lower_bounds(self, session: Session, view: FabricView, jobs: Mapping[str, Loaded],
                      gone: Mapping[str, set[DirectedLink]]) -> None:
        """Moved flows left link directions: the jobs whose background dropped there may have a
        lower optimum now, so their stored bounds fall to the proven pigeonhole bound
        (`te.carry`), as when a job is deleted; the refresh restores full bounds."""
        counts: dict[str, Mapping[Nic, int]] = {n: self.planner.memory.counts_of(j) for n, j in jobs.items()}
        for name, j in jobs.items():
            row = jobs_repo.by_id(session, j.job_id)
            if row is None or row.status != JobStatus.PLANNED.value or not row.plan:
                continue
            left: set[DirectedLink] = set().union(*(g for n, g in gone.items() if n != name))
            if not left:
                continue
            pairs = {name: {(f.src, f.dst) for f in j.flows}}
            lowered = bounds_after_jobs_change(view, {name: float(row.plan.get("lower_bound", 0.0))},
                                               counts, counts, pairs, left)
            if name in lowered:
                row.plan = {**row.plan, "lower_bound": lowered[name]}


def _summary(doc: Mapping[str, Any], moved: int) -> PlanSummary:
    return replace(summary_from_document(doc), moved_flows=moved)


def install(rt: Runtime, planner: Planner, telemetry: SwitchTelemetry) -> Rebalancer:
    """Register the `rebalance` worker (once per runtime) and wake it when congestion enters."""
    rebalancer = Rebalancer(rt, planner, telemetry)
    rt.workers[:] = [w for w in rt.workers if w.name != "rebalance"] + [rebalancer.worker]
    telemetry.on_transitions = _waker(rebalancer)
    return rebalancer


def _waker(rebalancer: Rebalancer) -> Callable[[list[Transition]], None]:
    def wake(transitions: list[Transition]) -> None:
        rebalancer.worker.wake()  # (called for transitions, or lost capacity confirmed on a congested direction)
    return wake
