"""The planning service (C4P): plans pending jobs, re-plans after link changes, keeps every
stored plan valid and every stored bound proven, and improves plans in the background.

Read it top to bottom: the worker's `step`; planning (`_plan`); writing a plan (`write`,
the one path every stored plan takes); a link change (`on_link_change`, inside the PATCH's
transaction); jobs posted or deleted (`on_jobs_changed`, inside the request's transaction);
the summary refresh. The decisions are the pure core's (`controller.te`: plans, re-plans,
which stored bounds survive a change); this module runs transactions, keeps the memory
(`planner_memory`) and reads and writes rows through `store.jobs_repo` and
`store.flows_repo`.

Throughput under churn (issue 18): pending jobs are planned in batches (`_batches`: up to
`PLAN_BATCH_JOBS` jobs and `PLAN_BATCH_FLOWS` flows, placed jointly in one plan over one read
of the fabric and the other jobs' background; a failed batch is retried job by job); the
summaries of many jobs share one count of every job's flows (`te.summary.LoadBook`); a joint
re-plan or re-optimisation writes and re-summarises only the jobs it moved (the others'
summaries go to the refresh); refreshes run as one batch that yields to pending jobs after
`REFRESH_SLICE_S`; reads fetch only what the memory lacks. A DELETE frees load without a
re-plan.

POST and DELETE cost the job's own flows, not the number of active jobs (issue 18). They
used to read every planned job's bound and rewrite those the change may have made too high
(with shared NICs, all of them): O(active jobs) rows per request under the fabric's lock. Now
one fabric-wide bound epoch (`store.jobs_repo.BoundEpoch`, one row) records what they did to
every bound at once (`te.carry`): `log_scale` takes ln of a posted job's demand factor (over
the NICs it shares, from the flows-per-NIC rows `nic_flows`, which the same transactions keep
exact), `drops` counts planned jobs gone (their flows left the background). Each job row keeps
the epoch its stored bound was proven at; reads (`services.jobs.Bounds`: GET, lists, metrics)
show `te.carry.shown_bound`: the stored bound times exp(log_scale now - then) while no planned
job left since, else the NIC pigeonhole bound, never below the pigeonhole bound, never above
the stored figure. So what users see is proven at every commit, without any other row
written. A plan or summary stores the epoch read *before* the state it was computed on: what
changed after is applied at read time (this replaced the per-commit adjustment of plans that
raced a POST). The refresh then stores full bounds at the current epoch. The price: until the
refresh, a job whose candidates do not cross the deleted job's links shows the pigeonhole
bound where the crossing test would have kept its own (the test needs the job's candidates:
the planner pays it in the refresh, not the request).

Invariants, kept by every transaction that changes what a plan depends on:
- every plan written passed the solver-free validator on the fabric it is stored for, in
  model and probed mode (`write`); a plan that fails it is refused: the job fails visibly;
- every `lower_bound` shown is proven for the state as committed: the stored figure at its
  job's bound epoch, lowered at read time for the jobs posted and deleted since (above). A
  link change keeps a stored bound only when `te.carry` says the change cannot have lowered
  the job's optimum, else stores the pigeonhole bound (a rewrite that leaves the job's epoch:
  conservative). All writers take the fabric's lock first (`fabric_repo.lock`/
  `bump_revision`/`claim_revision`), so they serialize; every change of the active jobs
  (POST, DELETE, a job failing, a failed job pending again) keeps `nic_flows` and the epoch
  in the same transaction. The background refresh then restores full bounds;
- API.md's demand rule everywhere: a flow's demand counts every active (pending or planned)
  job's flows on its NIC.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

from prometheus_client import Counter as Metric
from sqlalchemy.orm import Session

from controller.domain.fabric import Fabric, HashingMode, LinkState
from controller.domain.jobs import Flow, FlowKey, JobStatus, PlanSummary
from controller.services import collector, plan_pool
from controller.services.clock import now_us
from controller.services.events import emit
from controller.services.jobs import Bounds, flow_counts, spec_from_document
from controller.services.planner_memory import IndexKey, Loaded, PlannerMemory
from controller.services.probes import probe_book
from controller.services.runtime import Runtime
from controller.services.timings import PLANNER_SECONDS
from controller.services.workers import PeriodicWorker
from controller.store import fabric_repo, flows_repo, jobs_repo
from controller.store.jobs_repo import BoundEpoch, JobState
from controller.store.tables import JobRow
from controller.te import flows as job_flows
from controller.te import parts as te_parts
from controller.te import planner as te_planner
from controller.te.candidates import Candidates, Nic
from controller.te.carry import demand_factor
from controller.te.config import Config
from controller.te.instance import ActiveJob, demands_gbps
from controller.te.ports import ModelPorts
from controller.te.probes import ProbeBook, distinct_sports, spread_connections
from controller.te.replan import index_plans, replan_indexed
from controller.te.summary import LoadBook, job_maxima, summarize
from controller.te.validate import plan_problems
from controller.topology.build import with_link_state
from controller.topology.graph import FabricView

log = logging.getLogger(__name__)
WORKER_INTERVAL_S = 1.0
PROBE_WAIT_S = 30.0  # probed mode: a job whose pairs lack probes stays pending this long
# A link change's summary refresh (bound, ECMP, simulation: a few hundred ms of CPU at 16k
# flows) waits this long, then for the worker's next tick: started at once, it would compete
# for the interpreter with the PATCH's own response and with the next PATCH of a burst.
REFRESH_DELAY_S = 0.25
PROGRESS_AFTER_S = 0.5  # a plan running longer than this shows its phase on the job record
WARM_PAIRS = 4096  # the worker samples the routes of at most this many planned port pairs ahead
# Pending jobs are planned in batches of at most this many jobs and flows (a larger job alone).
PLAN_BATCH_JOBS = 128
PLAN_BATCH_FLOWS = 2048
# While jobs are pending, a summary refresh yields to planning them after this long.
REFRESH_SLICE_S = 0.2
# A step plans the jobs posted while it planned, up to this many rounds, before anything else;
# while jobs keep coming, the summary refresh and the link-change index wait (issue 18: both
# cost a pass over every active job's flows, and the next job would make them stale again).
PLAN_ROUNDS = 8
# ... and while they keep coming, the passes over every active job (re-optimisation, probed
# learning, the summary refresh, the link-change index) wait, but never longer than this: a
# link change then finds a current index, not a full pass under the fabric's lock.
TAIL_DEFER_S = 2.0

BOUND_VIOLATIONS = Metric("c4_plan_bound_violations_total",
                          "Plans whose proven lower bound came out above the plan (a bug; replaced by a safe bound)")
REFUSED = Metric("c4_plans_refused_total", "Plans the validator refused to store (a bug; the job failed)")

Signature = frozenset[tuple[str, int, int, str]]


class Planner:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        s = rt.settings
        self.config = Config(time_limit_s=s.plan_time_limit_s, cpsat_time_limit_s=min(2.0, s.plan_time_limit_s))
        self.memory = PlannerMemory()
        n = s.plan_processes if s.plan_processes is not None else plan_pool.default_processes()
        self.parts = plan_pool.PartPool(n)  # independent fabric parts of a batch, in parallel processes
        # The rebalancer (`services.rebalance`) pauses the periodic re-optimisation, and new
        # jobs' moving of other jobs' flows, while its moves are held down: neither sees the
        # measured background.
        self.reopt_paused: Callable[[], bool] = lambda: False
        self._tail_at = time.monotonic()  # when the step last ran its passes over every job
        # The first step (of this planner, or after the process leads again) schedules the
        # stored summaries that lack a figure first (`_adopt_lacking`): a new leader's memory
        # does not know them.
        self._adopt = True

    def on_start(self) -> None:
        """The planner worker starts (this process leads): the next step adopts the stored
        summaries that lack a figure (another leader may have written them meanwhile)."""
        self._adopt = True

    # --- the worker's step ----------------------------------------------------------------

    def step(self) -> None:
        """Plan the pending jobs (oldest first), re-optimise when due, refresh the summaries
        the last changes made stale, and index the plans for the next link change."""
        with self.rt.sessions() as session:
            revision = fabric_repo.revision(session)
            pending = jobs_repo.named(session, JobStatus.PENDING.value)
        if revision is None:
            return
        if self._adopt:
            self._adopt_lacking()
        written: dict[str, Signature] = {}
        tried: set[str] = set()
        for _ in range(PLAN_ROUNDS):
            usable = []
            for name, gone in self._unusable_all(pending).items():
                if gone:  # e.g. a forced PUT dropped a host the job uses: say which, not a KeyError
                    self._fail(name, gone)
                else:
                    usable.append(name)
            for batch in self._batches(usable):
                written |= self._plan_batch(batch)
            tried.update(pending)
            pending = self._new_pending(tried)
            if not pending:
                break
        overdue = time.monotonic() - self._tail_at >= TAIL_DEFER_S
        if pending and not overdue:  # jobs keep coming: plan them first, the rest next time
            self._refresh_stale(written)
            return
        self._read_row_ids()
        written |= self._learn()
        reopt = time.monotonic() - self.memory.last_reopt >= self.rt.settings.reoptimize_interval_s
        if (self.memory.reopt_due or reopt) and not self.reopt_paused():
            self.memory.reopt_due = False
            self.memory.last_reopt = time.monotonic()
            budget = replace(self.config, move_budget=self.rt.settings.move_budget)
            with PLANNER_SECONDS.labels("reoptimize").time():
                written |= self._plan(None, budget, "reoptimize")
        self._refresh_stale(written)
        due = self.memory.refreshes_due(time.monotonic())
        if due and (overdue or not self._new_pending(tried)):
            try:
                with PLANNER_SECONDS.labels("refresh").time():
                    self._refresh_batch(due)
            except Exception:  # a failed refresh must not stop the index; each job on its own next
                log.exception("refreshing %d summaries failed", len(due))
                for name, when in due:
                    try:
                        self._refresh_batch([(name, when)])
                    except Exception:
                        log.exception("refreshing the summary of job %s failed", name)
                        self.memory.schedule_refresh({name}, time.monotonic() + WORKER_INTERVAL_S)
        if overdue or not self._new_pending(tried):
            self._build_index()
            self._tail_at = time.monotonic()

    def _adopt_lacking(self) -> None:
        """Schedule the refresh of every stored summary that lacks its ECMP figure (a batch's,
        `Config.ecmp_simulation_later`) first, oldest plan first, as when its plan was written:
        after a restart or a change of leader the memory that gave them priority is gone, and
        they would wait behind every other refresh. Waiting since: when the plan was written
        (its row's `updated_at_us`, on this process's monotonic clock)."""
        with self.rt.sessions() as session:
            lacking = jobs_repo.planned_lacking(session, "ecmp_predicted_busbw_fraction")
        mono, wall = time.monotonic(), now_us()
        for name, written_us in lacking:
            self.memory.schedule_refresh({name}, mono, first=True, since=mono - max(0, wall - written_us) / 1e6)
        self._adopt = False

    def _batches(self, names: list[str]) -> list[list[str]]:
        """Pending jobs in planning batches, oldest first: up to `PLAN_BATCH_JOBS` jobs and
        `PLAN_BATCH_FLOWS` flows (a larger job alone). One batch is one plan: one pass over
        the fabric state and the other jobs' background, the batch's flows placed jointly.

        With planning processes (`C4_PLAN_PROCESSES` >= 2) on a model-hashed fabric, the jobs
        are first grouped by the parts they fall in (`te.parts.split` of the pending jobs
        alone: an active job across parts only makes the plan's own split coarser), each
        part's jobs cut so, and a batch holds chunks of different parts, oldest first: at least
        one per process (large jobs of different pods, planned side by side), more while the
        batch stays within the processes' share of jobs and flows; a part's chunks go in
        successive batches, in order."""
        with self.rt.sessions() as session:
            derived = self._active_flows(session, jobs_repo.active_states(session))[0]
            got = self.rt.fabric_cache.current(session) if self.parts.enabled else None
        chunks = self._chunks(names, derived)
        if got is None or got[1].hashing.mode != HashingMode.MODEL or len(chunks) < 2:
            return chunks
        known = {n: derived[n] for n in names if n in derived}
        at = {n: i for i, n in enumerate(names)}
        parted = [(i, c) for i, p in enumerate(te_parts.split(got[2], known, {}))
                  for c in self._chunks(list(p.targets), derived)]
        # unreadable: `load` leaves it out, `_plan` fails it (a part of its own)
        parted += [(-1 - i, [n]) for i, n in enumerate(names) if n not in known]
        parted.sort(key=lambda pc: at[pc[1][0]])
        width = self.parts.processes
        # A batch takes at most one chunk of each part (two of one part would be one part of
        # twice a batch's size, planned in one process), and a part's next chunk goes in a
        # later batch than its previous one (they share links: the older first). It holds at
        # least `width` chunks, more while within `width` times a batch's flows and jobs.
        batches: list[tuple[list[str], set[int], list[int]]] = []  # names, parts, [flows]
        after: dict[int, int] = {}  # part -> the batch of its last chunk
        for part, c in parted:
            n = sum(len(derived.get(x, ())) for x in c)
            for b in range(after.get(part, -1) + 1, len(batches)):
                names_b, parts_b, flows_b = batches[b]
                if part not in parts_b and (len(parts_b) < width or (
                        flows_b[0] + n <= width * PLAN_BATCH_FLOWS and len(names_b) + len(c) <= width * PLAN_BATCH_JOBS)):
                    break
            else:
                b = len(batches)
                batches.append(([], set(), [0]))
            batches[b][0].extend(c)
            batches[b][1].add(part)
            batches[b][2][0] += n
            after[part] = b
        return [b[0] for b in batches]

    @staticmethod
    def _chunks(names: list[str], derived: Mapping[str, list[Flow]]) -> list[list[str]]:
        """`names` in order, cut at `PLAN_BATCH_JOBS` jobs and `PLAN_BATCH_FLOWS` flows (a
        larger job alone)."""
        out: list[list[str]] = []
        flows = 0
        for name in names:
            n = len(derived.get(name, ()))  # unreadable: 0 (`load` leaves it out)
            if out and len(out[-1]) < PLAN_BATCH_JOBS and flows + n <= PLAN_BATCH_FLOWS:
                out[-1].append(name)
                flows += n
            else:
                out.append([name])
                flows = n
        return out

    def _plan_batch(self, batch: list[str]) -> dict[str, Signature]:
        """Plan one batch; if it fails as a whole, each job on its own (one job's failure
        must not stop the others being planned)."""
        try:
            with PLANNER_SECONDS.labels("plan").time():  # (a batch's ECMP simulations: the refresh's)
                return self._plan(batch, replace(self.config, ecmp_simulation_later=True), "planned",
                                  0 if self.reopt_paused() else self.rt.settings.move_budget)
        except Exception as exc:
            if len(batch) == 1:
                gone = self._unusable_all(batch).get(batch[0])
                if gone:  # the fabric changed between the step's check and the plan (a forced PUT)
                    log.warning("job %s failed: %s", batch[0], gone)
                    self._fail(batch[0], gone)
                    return {}
                log.exception("planning job %s failed", batch[0])
                self._fail(batch[0], f"planning failed: {type(exc).__name__}: {exc}"[:500])
                return {}
            log.exception("planning a batch of %d jobs failed; planning them one by one", len(batch))
        written: dict[str, Signature] = {}
        for name in batch:
            written |= self._plan_batch([name])
        return written

    def _refresh_stale(self, written: Mapping[str, Signature]) -> None:
        """Every planned job's summary depends on every active job (demand, background): when
        the active jobs changed since the summaries were made, refresh them, except the ones
        just written over exactly the current jobs."""
        with self.rt.sessions() as session:
            states = jobs_repo.active_states(session)
        self.memory.retain([(s.id, n) for n, s in states.items()])
        now = _signature(states)
        if now == self.memory.refreshed_for():
            return
        planned = {n for n, s in states.items() if s.status == JobStatus.PLANNED.value}
        self.memory.schedule_refresh({n for n in planned if written.get(n) != now}, time.monotonic())
        self.memory.set_refreshed_for(now)

    # --- reading state --------------------------------------------------------------------

    def candidates(self, session: Session, fabric: Fabric, revision: int, link_change: bool = False) -> Candidates:
        """Candidates over `fabric`, which is exactly fabric revision `revision`, cached per
        revision. Model mode reuses the routes of the cached revision's port pairs that the
        difference did not touch (`Candidates.inherit`).

        `link_change`: called inside a link PATCH's transaction (revision = the one it
        creates). Routes are inherited only from revision - 1, the fabric the stored plans
        are valid on (a re-plan keeps the flows of untouched pairs without a look), and the
        new candidates are kept only once the transaction commits."""
        view = FabricView(fabric)
        if fabric.hashing.mode == HashingMode.PROBED:
            return Candidates(view, probe_book(session, view, self.rt.settings.probe_ttl_s))
        if not link_change:
            hit = self.memory.candidates(revision, fabric)
            if hit is not None:
                return hit
        cands = Candidates(view, ModelPorts(view, hashes=self.memory.hashes))
        old = self.memory.candidates_at(revision - 1) if link_change else self.memory.any_candidates()
        if old is not None and _same_but_link_states(old.view.fabric, fabric):
            cands.inherit(old)
        if link_change:
            self.memory.on_commit(session, lambda: self.memory.keep_candidates(revision, cands))
        else:
            self.memory.keep_candidates(revision, cands)
        return cands

    def load(self, session: Session) -> dict[str, Loaded]:
        """Every active job with its stored assignments (cached per job version)."""
        out: dict[str, Loaded] = {}
        states = sorted(jobs_repo.active_states(session).items(), key=lambda kv: kv[1].id)  # oldest first
        misses = []
        for name, st in states:
            hit = self.memory.loaded(name)
            if hit is None or (hit.job_id, hit.version, hit.status) != (st.id, st.version, st.status):
                misses.append(st.id)
        rows = {r.id: r for r in jobs_repo.rows_of(session, misses)}  # only what the memory lacks
        for name, st in states:
            row = rows.get(st.id)
            if row is None:
                hit = self.memory.loaded(name)
                if hit is not None and (hit.job_id, hit.version, hit.status) == (st.id, st.version, st.status):
                    out[name] = hit
                continue  # (a miss gone meanwhile)
            try:
                flows = self.memory.flows((row.id, row.name), row.spec)
            except (KeyError, TypeError, ValueError) as exc:  # a row no POST made: not planned on
                log.warning("job %s: unreadable spec (%s: %s), left out of planning", row.name, type(exc).__name__, exc)
                continue
            assigned, ids = (flows_repo.assignments(session, row.id) if row.status == JobStatus.PLANNED.value
                             else ({}, {}))
            out[row.name] = Loaded(row.name, row.id, row.version, row.status, flows, assigned, ids)
            self.memory.keep_loaded(row.name, out[row.name])
        return out

    def _counts(self, session: Session) -> dict[str, Counter[Nic]]:
        """Flows per NIC of every active job (from the memory; only specs it lacks are read)."""
        return self._active_flows(session, jobs_repo.active_states(session))[1]

    def _active_flows(self, session: Session, states: Mapping[str, JobState],
                      ) -> tuple[dict[str, list[Flow]], dict[str, Counter[Nic]]]:
        """Flows and flows per NIC of the given active jobs; a job whose spec is unreadable is
        left out (see `load`)."""
        missing = [st.id for n, st in states.items() if not self.memory.has_flows((st.id, n))]
        specs = jobs_repo.specs_of(session, missing)
        flows: dict[str, list[Flow]] = {}
        counts: dict[str, Counter[Nic]] = {}
        for n, st in states.items():
            try:
                flows[n] = self.memory.flows((st.id, n), specs.get(st.id, {}))
                counts[n] = self.memory.counts((st.id, n), specs.get(st.id, {}))
            except (KeyError, TypeError, ValueError):
                continue
        return flows, counts

    def _total(self, jobs: Mapping[str, Loaded]) -> Counter[Nic]:
        """Flows per NIC over the given jobs (API.md's demand: all active jobs)."""
        total: Counter[Nic] = Counter()
        for j in jobs.values():
            total.update(self.memory.counts_of(j))
        return total

    # --- planning ---------------------------------------------------------------------------

    def _plan(self, names: list[str] | None, config: Config, reason: str, others_may_move: int = 0,
              ) -> dict[str, Signature]:
        """Plan the named jobs (None: every planned job, jointly) and store the plans; returns
        the jobs whose plan and summary were written, with the active jobs they saw.
        `others_may_move`: how many of the other jobs' flows the plan may move to lower the
        fabric-wide maximum (`te.planner.plan_global`)."""
        with self.rt.sessions() as session:
            epoch = jobs_repo.bound_epoch(session)  # before the state: what the plans are proven at
            got = self.rt.fabric_cache.current(session)
            if got is None:
                return {}
            revision, fabric = got[0], got[1]
            cands = self.candidates(session, fabric, revision)
            jobs = self.load(session)
        if names is None:
            names = [n for n, j in jobs.items() if j.status == JobStatus.PLANNED.value]
        names = [n for n in names if n in jobs]
        if not names:
            return {}
        seen = _signature({n: JobState(j.job_id, j.version, j.status) for n, j in jobs.items()})
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        first = [n for n in names if jobs[n].status == JobStatus.PENDING.value]
        progress = _Progress(self.rt, jobs[first[0]].job_id, len(jobs[first[0]].flows)) if len(first) == 1 else None
        with collector.paused():
            # a re-optimisation (all planned jobs) re-summarises only the jobs it moves
            lazy = {n for n in names if jobs[n].status == JobStatus.PLANNED.value}
            plans = te_planner.plan_global(fabric, {n: jobs[n].flows for n in names}, active, config, cands,
                                           progress or (lambda _phase: None), others_may_move, lazy,
                                           self.parts.runner(revision, fabric, cands))
        written: dict[str, Signature] = {}
        later: set[str] = set()  # summaries written without a figure (`Config.ecmp_simulation_later`)
        with self.rt.sessions() as session, session.begin(), collector.paused():
            if not fabric_repo.claim_revision(session, revision):
                return {}  # the fabric changed while planning: the next step plans again
            states = jobs_repo.active_states(session)
            drift = states != {n: JobState(j.job_id, j.version, j.status) for n, j in jobs.items()}
            after = dict(active)
            shown = Bounds(self.rt, session)  # one read of the epoch and NIC counts for the plans written
            for n in sorted(plans):
                if states.get(n) != JobState(jobs[n].job_id, jobs[n].version, jobs[n].status):
                    continue  # deleted or changed meanwhile
                p = plans[n]
                if p.summary is None and self._awaiting_probes(session, fabric, jobs[n]):
                    continue
                self.write(session, n, jobs[n], p, cands, reason if n in names else f"rebalanced for {names[0]}",
                           epoch=epoch, bounds=shown)
                stored = jobs_repo.by_id(session, jobs[n].job_id)
                if stored is None or stored.status != JobStatus.PLANNED.value:
                    shown = Bounds(self.rt, session)  # a job failed: the epoch and the counts may have moved
                if p.summary is not None and stored is not None and stored.status == JobStatus.PLANNED.value:
                    written[n] = seen
                    if p.summary.ecmp_predicted_busbw_fraction is None:
                        later.add(n)
                    after[n] = ActiveJob(jobs[n].flows, p.assignments)
                    if fabric.hashing.mode == HashingMode.PROBED:  # what this plan knew (`_learn`)
                        key, known = (jobs[n].job_id, n), _known_routes(cands, jobs[n])
                        self.memory.on_commit(session, lambda key=key, known=known:  # type: ignore[misc]
                                              self.memory.keep_knowledge(key, known))
            self._raise_maxima(session, cands.view, jobs, after, set(written))
            if later:  # their refresh fills the figure, before the other refreshes
                self.memory.on_commit(session, lambda: self.memory.schedule_refresh(later, time.monotonic(), first=True))
            if not drift and written:
                # Nothing else changed while planning: the summaries just written are those of
                # the state this transaction commits (no refresh needed for them).
                post = _signature(jobs_repo.active_states(session))
                written = {n: post for n in written}
        return written

    def _raise_maxima(self, session: Session, view: FabricView, jobs: Mapping[str, Loaded],
                      after: Mapping[str, ActiveJob], written: set[str]) -> None:
        """New flows on the fabric raise other planned jobs' `max_link_utilization` (their
        background grew; demands did not change: a pending job counted already): store it in
        the same transaction, so the summaries and the link views agree at once. Their bounds
        stay proven (more load cannot lower an optimum); the refresh redoes the rest."""
        others = [n for n, j in jobs.items() if j.status == JobStatus.PLANNED.value and n not in written]
        if not written or not others:
            return
        total: Counter[Nic] = Counter()
        counts = self._counts(session)
        for c in counts.values():  # every active job now (one may have been posted)
            total.update(c)
        # (a job deleted meanwhile is neither raised nor counted: its NIC may have no demand now)
        after = {n: a for n, a in after.items() if n in counts}
        others = [n for n in others if n in counts]
        maxima = job_maxima(view, after, demands_gbps(view.fabric, total), others)
        stored = jobs_repo.planned_maxima(session)  # one number per job (not its document)
        up = {}
        for n in others:
            got = stored.get(n)
            if got is not None and got[0] == jobs[n].job_id and maxima[n] > (got[1] or 0.0) + 1e-12:
                up[got[0]] = round(maxima[n], 9)
        docs = jobs_repo.plans_of(session, sorted(up))  # the documents of the jobs raised only
        jobs_repo.set_plans(session, {i: {**doc, "max_link_utilization": up[i]} for i, doc in docs.items()})

    def _learn(self) -> dict[str, Signature]:
        """Probed mode: re-plan a planned job when probes taught more of its paths since its
        last plan (it was planned as soon as each pair had one): until every equal-cost path
        of its pairs is known, or the agents find no more (their probe budget, and
        `C4_PROBE_TTL_S`, bound how long knowledge grows)."""
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.current(session)
            if got is None or got[1].hashing.mode != HashingMode.PROBED:
                return {}
            cands = self.candidates(session, got[1], got[0])
            jobs = self.load(session)
        grown = []
        for name, job in jobs.items():
            if job.status != JobStatus.PLANNED.value:
                continue
            known = _known_routes(cands, job)
            before = self.memory.knowledge((job.job_id, name))
            self.memory.keep_knowledge((job.job_id, name), known)
            if before is not None and known > before:
                grown.append(name)
        written: dict[str, Signature] = {}
        for name in grown:
            written |= self._plan([name], self.config, "probes learned")
        return written

    def _awaiting_probes(self, session: Session, fabric: Fabric, job: Loaded) -> bool:
        """Probed mode: a young job with no route yet waits for the agents' probes."""
        if fabric.hashing.mode != HashingMode.PROBED:
            return False
        row = jobs_repo.by_id(session, job.job_id)
        return row is not None and now_us() - row.created_at_us < PROBE_WAIT_S * 1_000_000

    # --- writing a plan -------------------------------------------------------------------

    def write(self, session: Session, name: str, job: Loaded, plan: te_planner.JobPlan, cands: Candidates,
              reason: str, since: FabricView | None = None,
              pairs: Mapping[tuple[str, str], list[FlowKey]] | None = None, epoch: BoundEpoch | None = None,
              bounds: Bounds | None = None) -> int:
        """Validate and store a job's new plan; returns how many of its flows changed
        assignment (`changed_flows`). `since`: the fabric its stored assignments were last
        validated on (default: this one; a link change passes the fabric before it);
        `pairs`: the new plan's flows by port pair, when the caller has them (an index);
        `epoch`: the bound epoch read before the state the summary was computed on (None:
        the summary's bound is not proven for a later state than the stored one's: the job's
        epoch stays); `bounds`: how bounds are shown in this transaction, when the caller
        writes several plans (read once for them)."""
        row = jobs_repo.by_id(session, job.job_id)
        if row is None:
            return 0
        probed = cands.ports.seen() if isinstance(cands.ports, ProbeBook) else None
        if probed is not None and cands.view.fabric.hashing.protocol == "tcp":  # a socket per flow
            if row.status == JobStatus.PENDING.value:  # no socket yet: spread connections over paths (te.probes)
                nic = demands_gbps(cands.view.fabric, sum(self._counts(session).values(), Counter()))
                plan = replace(plan, assignments=spread_connections(
                    cands.view, plan.assignments, probed, {f.key: nic.get(f.src, 0.0) for f in job.flows}))
            plan = replace(plan, assignments=distinct_sports(plan.assignments, probed, job.assignments))
        if plan.violation is not None:
            BOUND_VIOLATIONS.inc()
            log.error("job %s: proven bound above the plan (replaced by a safe bound): %s", name, plan.violation)
        if plan.summary is None:
            self._store_failure(session, name, row, plan.error or "no plan", reason)
            return 0
        old = job.assignments
        changed = [k for k, a in plan.assignments.items() if (b := old.get(k)) is not a and b != a]
        first = row.status == JobStatus.PENDING.value  # a pending job has no flow rows
        unchanged: dict[tuple[str, str], list[FlowKey]] = {}
        if not first:
            moved = set(changed)
            if pairs is None:
                grouped: dict[tuple[str, str], list[FlowKey]] = defaultdict(list)
                for k, a in plan.assignments.items():
                    grouped[(a.src_node, a.dst_node)].append(k)
                pairs = grouped
            unchanged = {p: ([k for k in keys if k not in moved] if moved else keys) for p, keys in pairs.items()}
        problems = plan_problems(cands.view, job.flows, plan.assignments, probed,
                                 unchanged_since=None if first else (since or cands.view), unchanged=unchanged)
        if problems:
            REFUSED.inc()
            log.error("job %s: plan refused by the validator (%d problems), first: %s", name, len(problems), problems[0])
            self._store_failure(session, name, row, f"internal error: the plan failed validation: {problems[0]}", reason)
            return 0
        ids = job.row_ids
        if first:
            ids = flows_repo.insert(session, job.job_id, job.flows, plan.assignments, cands.view)
        elif changed:
            ids = ids or flows_repo.row_ids(session, job.job_id)
            by_key = {f.key: f for f in job.flows}
            flows_repo.update_routes(session, job.job_id, [by_key[k] for k in changed], ids, plan.assignments,
                                     cands.view)
        if changed or first:
            row.version += 1
            self.memory.on_commit(session, self.rt.versions_changed)  # long-polls in this process
        now = now_us()
        row.status, row.error, row.updated_at_us, row.progress = JobStatus.PLANNED.value, None, now, None
        row.plan = asdict(plan.summary)
        if epoch is not None:
            jobs_repo.set_job_epoch(row, epoch)
        # Memory takes the new plan only once it is committed: a rolled-back plan must not be
        # mistaken later for a plan of the same version written by another transaction.
        stored = Loaded(name, job.job_id, row.version, row.status, job.flows, dict(plan.assignments), ids)
        self.memory.forget(name)
        self.memory.on_commit(session, lambda: self.memory.keep_loaded(name, stored))
        if first:
            # The bound as proven now, as GET shows it: jobs posted since `epoch` was read lowered it.
            shown = (bounds or Bounds(self.rt, session)).plan(row) if epoch is not None else row.plan
            emit(session, "job.planned", {"job": name, "version": row.version, "plan": shown}, now)
        if changed and not first:
            emit(session, "job.replanned", {"job": name, "version": row.version, "reason": reason,
                                            "changed_flows": len(changed), "moved_flows": plan.moved}, now)
        return len(changed)

    def _store_failure(self, session: Session, name: str, row: JobRow, error: str, reason: str) -> None:
        had_flows = row.status == JobStatus.PLANNED.value
        if row.status in jobs_repo.ACTIVE:  # its flows stop counting (and leave the background)
            self._active_changed(session, row, -1)
        row.status, row.error, row.updated_at_us, row.progress = JobStatus.FAILED.value, error, now_us(), None
        flows_repo.delete_for(session, row.id)
        if had_flows:  # agents long-polling the assignments must see them go
            row.version += 1
        self.memory.on_commit(session, self.rt.versions_changed)  # (its status: cached reads)
        emit(session, "job.failed", {"job": name, "version": row.version, "error": error, "reason": reason}, now_us())
        self.memory.forget(name)

    def _fail(self, name: str, error: str) -> None:
        """Mark one job failed (its plan could not be computed), in a transaction of its own."""
        with self.rt.sessions() as session, session.begin():
            fabric_repo.lock(session)
            row = jobs_repo.by_name(session, name)
            if row is not None:
                self._store_failure(session, name, row, error, "error")

    def _unusable_all(self, names: list[str]) -> dict[str, str | None]:
        """Per job (in order): why the stored fabric cannot carry it (its hosts, NICs or
        ranks), or None. One read of the fabric and the specs for all of them; a job checked
        on this fabric revision before is not checked again."""
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.get(session)
            revision = fabric_repo.revision(session)
            states = jobs_repo.active_states(session) if names else {}
            unchecked = [states[n].id for n in names
                         if n in states and not self.memory.usable((states[n].id, n, revision))]
            specs = jobs_repo.specs_of(session, unchecked)
        out: dict[str, str | None] = {}
        for name in names:
            st = states.get(name)
            if got is None or st is None or st.id not in specs:  # gone, or checked before on this fabric
                out[name] = None
                continue
            key = (st.id, name, revision)
            problems = job_flows.problems(spec_from_document(dict(specs[st.id])), got[0])
            if not problems:
                self.memory.keep_usable(key)
                out[name] = None
                continue
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            out[name] = ("the fabric cannot carry the job: "
                         + "; ".join(f"{p.field}: {p.message}" for p in problems[:3]) + more)[:500]
        return out

    def _read_row_ids(self) -> None:
        """Row ids of newly planned jobs, read here after the plan is stored so that neither
        the first plan nor the first link change waits for them (`write` needs them to update)."""
        lacking = [job for job in self.memory.all_loaded()
                   if job.status == JobStatus.PLANNED.value and job.assignments and not job.row_ids]
        if not lacking:
            return
        with self.rt.sessions() as session:  # one read for all of them (issue 18: 1,000 jobs planned in a burst)
            ids = flows_repo.row_ids_of(session, [job.job_id for job in lacking])
        for job in lacking:
            job.row_ids.update(ids.get(job.job_id, {}))

    # --- a link change -----------------------------------------------------------------------

    def on_link_change(self, session: Session, fabric: Fabric, link: str, state: LinkState) -> int:
        """Re-plan the flows the change broke, in the caller's transaction (which took the
        fabric's lock and bumped its revision); returns how many flows changed assignment."""
        with collector.paused():
            return self._on_link_change(session, fabric, link, state)

    def _on_link_change(self, session: Session, fabric: Fabric, link: str, state: LinkState) -> int:
        revision = fabric_repo.revision(session) or 0
        # The fabric before, as planning sees it (down and drained are alike): the previous
        # revision's view when the memory holds it (its distances are computed already).
        previous_fabric = with_link_state(fabric, link, LinkState.DOWN if state == LinkState.UP else LinkState.UP)
        kept = self.memory.candidates_at(revision - 1)
        before = (kept.view if kept is not None and _same_but_link_states(kept.view.fabric, fabric)
                  and kept.view.fabric.links == previous_fabric.links else FabricView(previous_fabric))
        joined = []
        if state == LinkState.UP:
            self.memory.reopt_due = True
            for row in jobs_repo.with_status(session, JobStatus.FAILED.value):  # a path may exist now
                # (its flows count again: `replan_indexed` scales the carried bounds for them)
                self._active_changed(session, row, +1, scale=False)
                row.status, row.error, row.updated_at_us = JobStatus.PENDING.value, None, now_us()
                joined.append(row.name)
            if joined:  # their status changed: no cached read shows the old one
                self.memory.on_commit(session, self.rt.versions_changed)
        cands = self.candidates(session, fabric, revision, link_change=True)
        jobs = self.load(session)
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        previous = {n: summary_from_document(doc) for n, doc in jobs_repo.summaries(session).items() if n in jobs}
        key = _index_key(jobs)
        result = replan_indexed(fabric, active, cands, previous, before, self.memory.index(key), joined)
        reason = f"link {link} {state.value}"
        total = 0
        for n in sorted(result.plans):
            pairs = result.index.by_pair.get(n) if result.index is not None else None
            total += self.write(session, n, jobs[n], result.plans[n], cands, reason, since=before, pairs=pairs)
        for n, bound in sorted(result.bounds.items()):
            other = jobs_repo.by_id(session, jobs[n].job_id)
            if other is not None and other.plan and bound != other.plan.get("lower_bound"):
                other.plan = {**other.plan, "lower_bound": bound}
        refresh = set(result.plans) | set(result.bounds)
        if refresh:
            due = time.monotonic() + REFRESH_DELAY_S
            self.memory.on_commit(session, lambda: self.memory.schedule_refresh(refresh, due))
        if result.index is not None:  # the index of the plans just written, once committed
            versions = {n: (j.job_id, j.version, j.status) for n, j in jobs.items()}
            for n in result.plans:
                written = jobs_repo.by_id(session, jobs[n].job_id)
                if written is not None:
                    versions[n] = (written.id, written.version, written.status)
            ready: IndexKey = tuple((n, *versions[n]) for n in sorted(versions))
            index = result.index
            self.memory.on_commit(session, lambda: self.memory.keep_index(ready, index))
        return total  # the caller wakes the workers after the commit (summary refresh)

    def on_fabric_replaced(self, session: Session, fabric: Fabric) -> None:
        """A new fabric: every active job is planned again from scratch."""
        if jobs_repo.any_planned(session):  # every planned job's flows leave the background
            self.epoch(session)
            jobs_repo.advance_epoch(session, 0.0, 1)
        bumped = False
        for row in jobs_repo.active(session):
            flows_repo.delete_for(session, row.id)
            if row.status == JobStatus.PLANNED.value:
                row.version += 1  # its assignments are gone until the new plan
                bumped = True
            row.status, row.updated_at_us = JobStatus.PENDING.value, now_us()
            self.memory.forget(row.name)
        if bumped:
            self.memory.on_commit(session, self.rt.versions_changed)  # long-polls and cached reads

    # --- jobs posted or deleted --------------------------------------------------------------

    def on_jobs_changed(self, session: Session, posted: JobRow | None, deleted: JobRow | None) -> None:
        """Inside the POST's or DELETE's transaction (which took the fabric's lock first): count
        the job's flows per NIC in or out and advance the bound epoch (`te.carry`): a job
        posted on shared NICs lowers their demands (the epoch's scale takes its demand
        factor); a planned job deleted takes its flows out of the others' background (the
        epoch counts a drop). No other job's row is read or written: the cost is the job's
        own flows, whatever the number of active jobs, in two statements once the epoch has
        started. Bounds are shown lowered at read time (`services.jobs.Bounds`); the refresh
        follows and restores full ones."""
        row = posted if posted is not None else deleted
        if row is None or row.status not in jobs_repo.ACTIVE:
            return
        self._active_changed(session, row, +1 if posted is not None else -1)

    def epoch(self, session: Session) -> BoundEpoch:
        """The bound epoch, started (under the fabric's lock) if it was not: the active jobs'
        flows per NIC counted once (the only read of every active job; after a migration)."""
        got = jobs_repo.bound_epoch(session)
        if got is not None:
            return got
        total: Counter[Nic] = Counter()
        for c in self._active_flows(session, jobs_repo.active_states(session))[1].values():
            total.update(c)
        return jobs_repo.start_epoch(session, total)

    def _active_changed(self, session: Session, row: JobRow, sign: int, scale: bool = True) -> None:
        """A job's flows start (+1) or stop (-1) counting in the demands, in a transaction
        holding the fabric's lock; the row still has its old status. Starting lowers the
        demands of the NICs it shares: the epoch's scale takes the demand factor (unless
        `scale` is False: the caller lowers the bounds itself). A planned job stopping takes
        its flows out of the background: the epoch counts a drop.

        Once the epoch has started this is two statements (the counts' upsert, the epoch's
        UPDATE); the UPDATE finding no epoch row starts it (the counts just written were not
        kept: `start_epoch` counts every active job afresh) and applies the change to it."""
        try:
            counts = flow_counts(row)
        except (KeyError, TypeError, ValueError):
            self.epoch(session)
            return  # a row no POST made: it is left out of the demands everywhere (see `load`)
        if self._count(session, row, counts, sign, scale):
            return
        self.epoch(session)  # not started: every active job counted as stored now
        if sign > 0 and row.status in jobs_repo.ACTIVE:  # a POST: counted as the epoch started
            now = jobs_repo.nic_flows(session, counts)
            before = {nic: now.get(nic, 0) - n for nic, n in counts.items()}
            factor = demand_factor(before, {nic: before[nic] + n for nic, n in counts.items()}) if scale else 1.0
            jobs_repo.advance_epoch(session, math.log(factor) if factor < 1.0 else 0.0, 0)
        else:
            self._count(session, row, counts, sign, scale)

    def _count(self, session: Session, row: JobRow, counts: Mapping[Nic, int], sign: int, scale: bool) -> bool:
        """Add the job's flows per NIC and advance the epoch; False if the epoch has not started."""
        before = jobs_repo.add_nic_flows(session, {nic: sign * n for nic, n in counts.items()})
        log_factor, drops = 0.0, 0
        if sign > 0:
            factor = demand_factor(before, {nic: before.get(nic, 0) + n for nic, n in counts.items()}) if scale else 1.0
            log_factor = math.log(factor) if factor < 1.0 else 0.0
        elif row.status == JobStatus.PLANNED.value:
            drops = 1
        return jobs_repo.advance_started(session, log_factor, drops)

    # --- summary refresh --------------------------------------------------------------------

    def _refresh_batch(self, due: list[tuple[str, float]]) -> None:
        """Recompute planned jobs' summaries over the state as it is, in one pass: one read,
        every job's flows counted once (`LoadBook`), one transaction. While jobs are pending
        the refresh stops after `REFRESH_SLICE_S` (planning them comes first; the rest stays
        due for the next step). Stored if the fabric did not change meanwhile; when jobs were
        posted or deleted meanwhile, with the bounds adjusted for them (as a plan's are) and
        another refresh scheduled by the next step."""
        with self.rt.sessions() as session:
            epoch = jobs_repo.bound_epoch(session)  # before the state: what the summaries are proven at
            current = self.rt.fabric_cache.current(session)
            if current is None:
                return
            revision, fabric = current[0], current[1]
            cands = self.candidates(session, fabric, revision)
            jobs = self.load(session)
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        demand = demands_gbps(fabric, self._total(jobs))
        todo = [(n, when) for n, when in due if n in jobs and jobs[n].status == JobStatus.PLANNED.value]
        for n, when in due:
            if (n, when) not in todo:
                self.memory.take_refresh(n, when)
        if not todo:
            return
        book = LoadBook(fabric, cands.view, active, demand) if len(todo) > 1 else None
        t0 = time.monotonic()
        done: dict[str, tuple[float, PlanSummary]] = {}
        for name, when in todo:
            if done and time.monotonic() - t0 > REFRESH_SLICE_S and self._pending_exist():
                break
            _, summary, violation = summarize(fabric, cands, active, name, demand, self.config, time.monotonic(),
                                              "refresh", book=book)
            if violation is not None:
                BOUND_VIOLATIONS.inc()
                log.error("job %s: proven bound above the plan (replaced by a safe bound): %s", name, violation)
            done[name] = (when, summary)
        with self.rt.sessions() as session, session.begin():
            # The fabric lock first (on SQLite the database's write lock), then the jobs.
            if not fabric_repo.claim_revision(session, revision):
                self.memory.schedule_refresh(set(done), time.monotonic())
                return
            states = jobs_repo.active_states(session)
            for name, (when, summary) in done.items():
                self.memory.take_refresh(name, when)
                if states.get(name) != JobState(jobs[name].job_id, jobs[name].version, jobs[name].status):
                    continue  # deleted or re-planned meanwhile
                stored = jobs_repo.by_id(session, jobs[name].job_id)
                if stored is not None and stored.plan:
                    keep: dict[str, object] = {k: stored.plan[k] for k in ("solve_ms", "solver", "moved_flows",
                                                                           "congestion") if k in stored.plan}
                    stored.plan = {**asdict(summary), **keep}
                    jobs_repo.set_job_epoch(stored, epoch)

    def _pending_exist(self) -> bool:
        with self.rt.sessions() as session:
            return bool(jobs_repo.named(session, JobStatus.PENDING.value))

    def _new_pending(self, tried: set[str]) -> list[str]:
        """Pending jobs this step has not tried to plan yet (posted meanwhile), oldest first."""
        with self.rt.sessions() as session:
            return [n for n in jobs_repo.named(session, JobStatus.PENDING.value) if n not in tried]

    # --- the plan index ---------------------------------------------------------------------

    def _build_index(self) -> None:
        """Index the planned jobs for the next link change unless the kept index is current,
        and make sure the current candidates hold their port pairs' routes (after a restart
        they do not: without them the next link change would look at every flow), up to
        `WARM_PAIRS` pairs (beyond, a link change samples the pairs it breaks)."""
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.current(session)
            if got is None:
                return
            jobs = self.load(session)
            key = _index_key(jobs)
            if not any(j.status == JobStatus.PLANNED.value for j in jobs.values()) or self.memory.index_key() == key:
                return
            cands = self.candidates(session, got[1], got[0])
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        with collector.paused():
            index = index_plans(got[2], active, demands_gbps(got[1], self._total(jobs)))
            pairs = [pair for by_pair in index.by_pair.values() for pair in by_pair]
            if len(pairs) <= WARM_PAIRS:  # (an all-to-all's 16k pairs: a link change samples its few)
                for pair in pairs:
                    cands.port_routes(*pair)
            self.memory.keep_index(key, index)


class _Progress:
    """Shows a pending job's planning phase on its record (`progress`: phase, since when, since
    when planning started, flows) once the plan has run `PROGRESS_AFTER_S`: each phase as it
    starts, in a short transaction of its own (best effort: a failed write is only logged).
    `write` clears it with the plan."""

    def __init__(self, rt: Runtime, job_id: int, flows: int) -> None:
        self.rt, self.job_id, self.flows = rt, job_id, flows
        self.t0, self.started_us = time.monotonic(), now_us()

    def __call__(self, phase: str) -> None:
        if time.monotonic() - self.t0 < PROGRESS_AFTER_S:
            return
        try:
            with self.rt.sessions() as session, session.begin():
                jobs_repo.set_progress(session, self.job_id, {"phase": phase, "since_us": now_us(),
                                                              "started_us": self.started_us, "flows": self.flows})
        except Exception as exc:
            log.warning("could not record the planning phase of job %d: %s", self.job_id, exc)


def _known_routes(cands: Candidates, job: Loaded) -> int:
    """How many (port pair, path) routes of the job's NIC pairs have a known source port."""
    return sum(len(cands.nic_routes(src, dst)) for src, dst in {(f.src, f.dst) for f in job.flows})


def _signature(states: Mapping[str, JobState]) -> Signature:
    return frozenset((n, s.id, s.version, s.status) for n, s in states.items())


def _index_key(jobs: Mapping[str, Loaded]) -> IndexKey:
    return tuple((n, jobs[n].job_id, jobs[n].version, jobs[n].status) for n in sorted(jobs))


def _same_but_link_states(a: Fabric, b: Fabric) -> bool:
    """Whether two fabrics differ at most in link states (then source ports may carry over)."""
    if a.switches != b.switches or a.hosts != b.hosts or a.hashing != b.hashing or len(a.links) != len(b.links):
        return False
    return all(x is y or replace(x, state=LinkState.UP) == replace(y, state=LinkState.UP)
               for x, y in zip(a.links, b.links, strict=True))  # `with_link_state` shares the others


def install(rt: Runtime) -> Planner:
    """Register the planner worker and hooks on the runtime (once per runtime)."""
    planner = Planner(rt)

    def mine(h: object) -> bool:
        return isinstance(getattr(h, "__self__", None), Planner)

    rt.on_link_change[:] = [h for h in rt.on_link_change if not mine(h)] + [planner.on_link_change]
    rt.on_fabric_replaced[:] = [h for h in rt.on_fabric_replaced if not mine(h)] + [planner.on_fabric_replaced]
    rt.on_jobs_changed[:] = [h for h in rt.on_jobs_changed if not mine(h)] + [planner.on_jobs_changed]
    rt.workers[:] = [w for w in rt.workers if w.name != "planner"] + [
        PeriodicWorker("planner", WORKER_INTERVAL_S, planner.step, on_start=planner.on_start)]
    return planner


def summary_from_document(doc: Mapping[str, Any]) -> PlanSummary:
    """A stored `plan` document as a `PlanSummary`; fields the summary does not hold (e.g. the
    rebalancer's `congestion`) are left out."""
    return PlanSummary(**{k: doc[k] for k in PlanSummary.__dataclass_fields__ if k in doc})
