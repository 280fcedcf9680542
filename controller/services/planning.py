"""The background planner (C4P): plans pending jobs, re-plans after link changes, and runs the
periodic global re-optimisation; it applies what the pure planner (`controller.te`) returns.

`install(rt)` adds the `planner` worker and the link-change / fabric-replaced hooks to the
runtime. The worker plans one pending job per transaction with the other active jobs as
background load, then (every `reoptimize_interval_s`, or after a link came back up) re-plans
all planned jobs together within `move_budget` moves. The link hook runs inside the link
PATCH's transaction: it moves only the flows whose route broke, bumps the affected jobs'
versions, emits `job.replanned`, and leaves the slower summary refresh to the worker (after
`REFRESH_DELAY_S`). The worker also indexes the planned jobs after each plan (`PlanIndex`:
flows per port pair, load per link) so that a link re-plan looks only at the flows of port
pairs the change touched; each re-plan hands on the index of what it wrote. Caches (loaded
plans, index) take a plan only once its transaction commits. A plan computed on a fabric
revision that changed meanwhile is dropped and redone.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import cast

from sqlalchemy import Table, delete, event, insert, select, update
from sqlalchemy.orm import Session

from controller.domain.fabric import Fabric, HashingMode, LinkState
from controller.domain.jobs import Assignment, Flow, FlowKey, JobStatus, PlanSummary
from controller.services.clock import now_us
from controller.services.events import emit
from controller.services.jobs import ACTIVE, spec_from_document
from controller.services.probes import probe_book
from controller.services.runtime import Runtime
from controller.services.timings import PLANNER_SECONDS
from controller.services.workers import PeriodicWorker
from controller.store import fabric_repo
from controller.store.tables import FlowRow, JobRow
from controller.te import flows as job_flows
from controller.te import planner as te_planner
from controller.te.candidates import Candidates, HashCache, ModelPorts
from controller.te.config import Config
from controller.te.instance import ActiveJob, count_by_nic, job_demands
from controller.te.replan import PlanIndex, index_plans, pigeonhole, replan_indexed
from controller.te.summary import summarize
from controller.topology.graph import FabricView

log = logging.getLogger(__name__)
WORKER_INTERVAL_S = 1.0
PROBE_WAIT_S = 30.0  # probed mode: a job whose pairs lack probes stays pending this long
# A link change's summary refresh (bound, ECMP, simulation: a few hundred ms of CPU at 16k
# flows) waits this long, then for the worker's next tick: started at once, it would compete
# for the interpreter with the PATCH's own response and with the next PATCH of a burst.
REFRESH_DELAY_S = 0.25


@dataclass
class Loaded:
    """One active job as stored: its row id, version, flows and (if planned) assignments."""

    job_id: int
    version: int
    status: str
    flows: list[Flow]
    assignments: dict[FlowKey, Assignment]
    row_ids: dict[FlowKey, int]


class Planner:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        s = rt.settings
        self.config = Config(time_limit_s=s.plan_time_limit_s, cpsat_time_limit_s=min(2.0, s.plan_time_limit_s))
        self._cands: tuple[int, Candidates] | None = None
        self._hashes = HashCache()  # hash values outlive fabric revisions (see `HashCache`)
        self._flows: dict[tuple[int, str], list[Flow]] = {}
        self._loaded: dict[str, Loaded] = {}
        self._refresh: dict[str, float] = {}  # job -> when its summary refresh may start (monotonic)
        # The planned jobs' index for the next link change (`te.replan.PlanIndex`), keyed by
        # their (name, id, version)s, so a new plan's commit makes it stale by itself: built by
        # the worker after a plan, handed on by each link re-plan once it commits.
        self._index: tuple[tuple[tuple[str, int, int], ...], PlanIndex] | None = None
        self._planned_seen: frozenset[tuple[str, int]] | None = None  # planned jobs the summaries were made for
        self._reopt_due = False
        self._last_reopt = time.monotonic()
        self._lock = threading.Lock()

    # --- reading state -------------------------------------------------------------------

    def candidates(self, session: Session, fabric: Fabric, revision: int, link_change: bool = False) -> Candidates:
        """Candidates over `fabric`, which is exactly fabric revision `revision`; cached per
        revision. Model mode reuses the routes of the cached revision's port pairs that the
        difference did not touch (`Candidates.inherit`).

        `link_change`: called inside a link PATCH's transaction (revision = the one it
        creates). Routes are inherited only from revision - 1, the fabric the stored plans
        are valid on (a re-plan keeps the flows of untouched pairs without a look), and the
        new candidates are cached only once the transaction commits."""
        view = FabricView(fabric)
        if fabric.hashing.mode == HashingMode.PROBED:
            return Candidates(view, probe_book(session, view, self.rt.settings.probe_ttl_s))
        with self._lock:
            kept = self._cands
        if (kept is not None and kept[0] == revision and not link_change
                and (kept[1].view.fabric is fabric or kept[1].view.fabric == fabric)):
            return kept[1]
        cands = Candidates(view, ModelPorts(view, hashes=self._hashes))
        old = kept[1] if kept is not None and (not link_change or kept[0] == revision - 1) else None
        if old is not None and _same_but_link_states(old.view.fabric, fabric):
            cands.inherit(old)

        def install() -> None:
            with self._lock:  # never over a newer revision's (a worker may read an older one)
                if self._cands is None or self._cands[0] <= revision:
                    self._cands = (revision, cands)

        if link_change:
            _on_commit(session, install)
        else:
            install()
        return cands

    def flows_of(self, row: JobRow) -> list[Flow]:
        key = (row.id, row.name)
        if key not in self._flows:
            self._flows[key] = job_flows.derive_flows(spec_from_document(row.spec))
        return self._flows[key]

    def load(self, session: Session) -> dict[str, Loaded]:
        """Active jobs with their stored assignments (cached per job version)."""
        out: dict[str, Loaded] = {}
        rows = list(session.scalars(select(JobRow).where(JobRow.status.in_(ACTIVE)).order_by(JobRow.id)))
        for row in rows:
            hit = self._loaded.get(row.name)
            if hit is not None and hit.job_id == row.id and hit.version == row.version and hit.status == row.status:
                out[row.name] = hit
                continue
            assigned: dict[FlowKey, Assignment] = {}
            ids: dict[FlowKey, int] = {}
            for f in session.scalars(select(FlowRow).where(FlowRow.job_id == row.id)):
                key = FlowKey(f.src_rank, f.dst_rank, f.channel, f.qp)
                ids[key] = f.id
                if f.path:
                    assigned[key] = Assignment(key, f"{f.src_host}:{f.src_nic}:{f.src_port}",
                                               f"{f.dst_host}:{f.dst_nic}:{f.dst_port}", int(f.udp_sport or 0),
                                               float(f.weight or 0.0), tuple(f.path), tuple(f.links or ()))
            out[row.name] = Loaded(row.id, row.version, row.status, self.flows_of(row), assigned, ids)
        self._loaded = dict(out)
        return out

    # --- writing plans -------------------------------------------------------------------

    _COLUMNS = ("job_id", "src_rank", "dst_rank", "channel", "qp", "src_host", "src_nic", "dst_host", "dst_nic",
                "src_port", "src_address", "dst_port", "dst_address", "udp_sport", "weight", "path", "links")

    def _tuples(self, job_id: int, flows: list[Flow], plan: dict[FlowKey, Assignment], view: FabricView,
                encode: Callable[[object], object]) -> list[tuple[object, ...]]:
        """Flow rows as value tuples in `_COLUMNS` order; `encode` maps a path or links list
        (computed once per distinct tuple: many flows share a path)."""
        out: list[tuple[object, ...]] = []
        ports: dict[str, tuple[object, object]] = {}
        enc: dict[tuple[str, ...], object] = {}
        for f in flows:
            a = plan[f.key]
            sp = ports.get(a.src_node)
            if sp is None:
                p = view.ports[a.src_node]
                sp = ports[a.src_node] = (p.port, p.address)
            dp = ports.get(a.dst_node)
            if dp is None:
                p = view.ports[a.dst_node]
                dp = ports[a.dst_node] = (p.port, p.address)
            path = enc.get(a.path)
            if path is None:
                path = enc[a.path] = encode(list(a.path))
            links = enc.get(a.links)
            if links is None:
                links = enc[a.links] = encode(list(a.links))
            k = f.key
            out.append((job_id, k.src_rank, k.dst_rank, k.channel, k.qp, f.src_host, f.src_nic, f.dst_host,
                        f.dst_nic, sp[0], sp[1], dp[0], dp[1], a.udp_sport, a.weight, path, links))
        return out

    def _rows(self, job_id: int, flows: list[Flow], plan: dict[FlowKey, Assignment], view: FabricView) -> list[dict[str, object]]:
        return [dict(zip(self._COLUMNS, t, strict=True)) for t in self._tuples(job_id, flows, plan, view, lambda x: x)]

    def _insert(self, session: Session, job_id: int, flows: list[Flow], plan: dict[FlowKey, Assignment],
                view: FabricView) -> None:
        """Insert flow rows: on SQLite straight through the driver with each distinct path's
        JSON encoded once (SQLAlchemy's per-value processing is most of the cost at 16k rows),
        else Core insert."""
        if not flows:
            return
        conn = session.connection()
        if conn.dialect.name != "sqlite":
            session.execute(insert(cast(Table, FlowRow.__table__)), self._rows(job_id, flows, plan, view))
            return
        sql = f"INSERT INTO flows ({', '.join(self._COLUMNS)}) VALUES ({', '.join('?' for _ in self._COLUMNS)})"
        dumps = _json_strings
        conn.exec_driver_sql(sql, self._tuples(job_id, flows, plan, view, dumps))

    _SET = ("src_port", "src_address", "dst_port", "dst_address", "udp_sport", "weight", "path", "links")

    def _update(self, session: Session, flows: list[Flow], ids: dict[FlowKey, int], plan: dict[FlowKey, Assignment],
                view: FabricView, job_id: int) -> None:
        """Rewrite the route columns of existing flow rows: on SQLite straight through the
        driver (as `_insert`), else a Core bulk update by primary key."""
        conn = session.connection()
        at = [self._COLUMNS.index(c) for c in self._SET]
        if conn.dialect.name != "sqlite":
            rows = self._rows(job_id, flows, plan, view)
            for r, f in zip(rows, flows, strict=True):
                r["id"] = ids[f.key]
            session.execute(update(FlowRow), [{"id": r["id"], **{c: r[c] for c in self._SET}} for r in rows])
            return
        dumps = _json_strings
        values = [(*(t[i] for i in at), ids[f.key])
                  for t, f in zip(self._tuples(job_id, flows, plan, view, dumps), flows, strict=True)]
        conn.exec_driver_sql(f"UPDATE flows SET {', '.join(c + ' = ?' for c in self._SET)} WHERE id = ?", values)

    def _row_ids(self, session: Session, job_id: int) -> dict[FlowKey, int]:
        conn = session.connection()
        if conn.dialect.name == "sqlite":  # straight through the driver: 16k rows in a few ms
            rows = conn.exec_driver_sql("SELECT id, src_rank, dst_rank, channel, qp FROM flows WHERE job_id = ?",
                                        (job_id,))
            return {FlowKey(a, b, c, q): i for i, a, b, c, q in rows}
        return {FlowKey(a, b, c, q): i for i, a, b, c, q in session.execute(
            select(FlowRow.id, FlowRow.src_rank, FlowRow.dst_rank, FlowRow.channel, FlowRow.qp)
            .where(FlowRow.job_id == job_id))}

    def write(self, session: Session, name: str, job: Loaded, plan: te_planner.JobPlan, view: FabricView,
              reason: str) -> int:
        """Store a job's new plan; returns how many assignments changed (path or port)."""
        row = session.get(JobRow, job.job_id)
        if row is None:
            return 0
        now = now_us()
        if plan.summary is None:
            had_flows = row.status == JobStatus.PLANNED.value
            row.status, row.error, row.updated_at_us = JobStatus.FAILED.value, plan.error, now
            session.execute(delete(FlowRow).where(FlowRow.job_id == job.job_id))
            if had_flows:  # agents long-polling the assignments must see them go
                row.version += 1
            emit(session, "job.failed", {"job": name, "version": row.version, "error": plan.error,
                                         "reason": reason}, now)
            return 0
        old = job.assignments
        changed = [k for k, a in plan.assignments.items() if (b := old.get(k)) is not a and b != a]
        first = row.status == JobStatus.PENDING.value  # a pending job has no flow rows
        ids = job.row_ids
        if first:
            self._insert(session, job.job_id, job.flows, plan.assignments, view)
            ids = self._row_ids(session, job.job_id) if conn_is_sqlite(session) else {}  # else: `_read_row_ids`
        elif changed:
            ids = ids or self._row_ids(session, job.job_id)
            by_key = {f.key: f for f in job.flows}
            self._update(session, [by_key[k] for k in changed], ids, plan.assignments, view, job.job_id)
        if changed or first:
            row.version += 1
        row.status, row.error, row.updated_at_us = JobStatus.PLANNED.value, None, now
        row.plan = _summary_doc(plan.summary)
        # The caches take the new plan only once it is committed: a rolled-back plan must not
        # be mistaken later for a plan of the same version written by another transaction.
        stored = Loaded(job.job_id, row.version, row.status, job.flows, dict(plan.assignments), ids)
        self._loaded.pop(name, None)
        _on_commit(session, lambda: self._loaded.__setitem__(name, stored))
        if first:
            emit(session, "job.planned", {"job": name, "version": row.version, "plan": row.plan}, now)
        if changed and not first:
            emit(session, "job.replanned", {"job": name, "version": row.version, "reason": reason,
                                            "changed_flows": len(changed), "moved_flows": plan.moved}, now)
        return len(changed)

    def _fail(self, name: str, error: str) -> None:
        """Mark one job failed (its plan could not be computed or stored), in a transaction of its own."""
        with self.rt.sessions() as session, session.begin():
            row = session.scalar(select(JobRow).where(JobRow.name == name))
            if row is None:
                return
            if row.status == JobStatus.PLANNED.value:
                row.version += 1
            session.execute(delete(FlowRow).where(FlowRow.job_id == row.id))
            row.status, row.error, row.updated_at_us = JobStatus.FAILED.value, error, now_us()
            emit(session, "job.failed", {"job": name, "version": row.version, "error": error, "reason": "error"},
                 now_us())
        self._loaded.pop(name, None)

    def _unusable(self, name: str) -> str | None:
        """Why the stored fabric cannot carry job `name` (its hosts, NICs or ranks), or None."""
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.get(session)
            doc = session.scalar(select(JobRow.spec).where(JobRow.name == name))
        if got is None or doc is None:
            return None
        found = job_flows.problems(spec_from_document(doc), got[0])
        if not found:
            return None
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        return ("the fabric cannot carry the job: "
                + "; ".join(f"{p.field}: {p.message}" for p in found[:3]) + more)[:500]

    # --- the worker -----------------------------------------------------------------------

    def step(self) -> None:
        with self.rt.sessions() as session:
            revision = fabric_repo.revision(session)
            pending = list(session.scalars(select(JobRow.name).where(JobRow.status == JobStatus.PENDING.value)
                                           .order_by(JobRow.id)))
        if revision is None:
            return
        written: dict[str, frozenset[tuple[str, int]]] = {}
        for name in pending:
            gone = self._unusable(name)
            if gone:  # e.g. a forced PUT dropped a host the job uses: say which, not a KeyError
                self._fail(name, gone)
                continue
            try:
                with PLANNER_SECONDS.labels("plan").time():
                    written |= self._plan_targets([name], self.config, "planned")
            except Exception as exc:  # one job's failure must not stop the others being planned
                log.exception("planning job %s failed", name)
                self._fail(name, f"planning failed: {type(exc).__name__}: {exc}"[:500])
        self._read_row_ids()
        reopt = time.monotonic() - self._last_reopt >= self.rt.settings.reoptimize_interval_s
        if self._reopt_due or reopt:
            self._reopt_due = False
            self._last_reopt = time.monotonic()
            budget = replace(self.config, move_budget=self.rt.settings.move_budget)
            with PLANNER_SECONDS.labels("reoptimize").time():
                written |= self._plan_targets(None, budget, "reoptimize")
        # A job planned, failed or deleted changes the others' demand and background: their
        # summaries (bound included) are refreshed.
        with self.rt.sessions() as session:
            planned = _planned_set(self.load(session))
        if planned != self._planned_seen:  # except summaries written over exactly these jobs
            fresh = {n for n, seen in written.items() if seen | {e for e in planned if e[0] == n} == planned}
            self._schedule_refresh({n for n, _ in planned} - fresh, time.monotonic())
            self._planned_seen = planned
        now = time.monotonic()
        with self._lock:
            ready = sorted((n, due) for n, due in self._refresh.items() if due <= now)
        for name, due in ready:
            try:
                with PLANNER_SECONDS.labels("refresh").time():
                    self._refresh_summary(name, due)
            except Exception:  # one job's refresh must not stop the others, nor the index
                log.exception("refreshing the summary of job %s failed", name)
                self._schedule_refresh({name}, time.monotonic() + WORKER_INTERVAL_S)
        self._build_index()

    def _schedule_refresh(self, names: set[str], due: float) -> None:
        with self._lock:
            for n in names:
                self._refresh[n] = due

    def stale_summaries(self, jobs: dict[str, Loaded]) -> set[str]:
        """Jobs whose stored summary may predate a change of their demand or background: a
        refresh is pending, or the set of planned jobs changed since the worker last looked."""
        with self._lock:
            pending = set(self._refresh)
        return set(jobs) if _planned_set(jobs) != self._planned_seen else pending & set(jobs)

    def _build_index(self) -> None:
        """Index the planned jobs for the next link change unless the kept index is current,
        and make sure the current candidates hold their port pairs' routes (after a restart
        they do not: without them the next link change would look at every flow)."""
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.current(session)
            if got is None:
                return
            jobs = {n: j for n, j in self.load(session).items() if j.status == JobStatus.PLANNED.value}
            key = _index_key(jobs)
            kept = self._index
            if not jobs or (kept is not None and kept[0] == key):
                return
            cands = self.candidates(session, got[1], got[0])
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        with _gc_paused():
            index = index_plans(got[2], active, job_demands(got[1], active))
            for pairs in index.by_pair.values():
                for pair in pairs:
                    cands.port_routes(*pair)
            self._index = (key, index)

    def _read_row_ids(self) -> None:
        """Row ids of newly planned jobs, read here after the plan is stored so that neither
        the first plan nor the first link change waits for them (`write` needs them to update)."""
        for job in list(self._loaded.values()):
            if job.status == JobStatus.PLANNED.value and job.assignments and not job.row_ids:
                with self.rt.sessions() as session:
                    job.row_ids.update(self._row_ids(session, job.job_id))

    def _plan_targets(self, names: list[str] | None, config: Config, reason: str) -> dict[str, frozenset[tuple[str, int]]]:
        """Plan the named jobs (None: every planned job, jointly) and store the plans; returns
        the jobs whose plan and summary were written, each with the planned jobs it saw."""
        with self.rt.sessions() as session:
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
        seen = _planned_set(jobs)
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        with _gc_paused():
            plans = te_planner.plan(fabric, {n: jobs[n].flows for n in names}, active, config, cands)
        written: dict[str, frozenset[tuple[str, int]]] = {}
        with self.rt.sessions() as session, session.begin(), _gc_paused():
            if not fabric_repo.claim_revision(session, revision):
                return {}  # the fabric changed while planning: the next step plans again
            for n in sorted(plans):
                if plans[n].summary is None and self._awaiting_probes(session, fabric, jobs[n]):
                    continue
                self.write(session, n, jobs[n], plans[n], cands.view, reason)
                if plans[n].summary is not None:
                    written[n] = seen
        return written

    def _awaiting_probes(self, session: Session, fabric: Fabric, job: Loaded) -> bool:
        """Probed mode: a young job with no route yet waits for the agents' probes."""
        if fabric.hashing.mode != HashingMode.PROBED:
            return False
        row = session.get(JobRow, job.job_id)
        return row is not None and now_us() - row.created_at_us < PROBE_WAIT_S * 1_000_000

    def _refresh_summary(self, name: str, due: float) -> None:
        with self._lock:
            if self._refresh.get(name) == due:  # not rescheduled meanwhile by a newer change
                del self._refresh[name]
        with self.rt.sessions() as session:
            current = self.rt.fabric_cache.current(session)
            if current is None:
                return
            revision, fabric = current[0], current[1]
            cands = self.candidates(session, fabric, revision)
            jobs = self.load(session)
        if name not in jobs or jobs[name].status != JobStatus.PLANNED.value:
            return
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        t0 = time.monotonic()
        _, summary = summarize(fabric, cands, active, name, job_demands(fabric, active), self.config, t0, "refresh")
        with self.rt.sessions() as session, session.begin():
            # Stored only if nothing it was computed from changed meanwhile (the fabric, or any
            # active job: the bound depends on the background); else it is computed again. The
            # fabric lock first (on SQLite the database's write lock), then the jobs; a job
            # committed later still changes the planned set, which the next step refreshes on.
            claimed = fabric_repo.claim_revision(session, revision)
            now_active = {n: (i, v, st) for n, i, v, st in session.execute(
                select(JobRow.name, JobRow.id, JobRow.version, JobRow.status).where(JobRow.status.in_(ACTIVE)))}
            if not claimed or now_active != {n: (j.job_id, j.version, j.status) for n, j in jobs.items()}:
                self._schedule_refresh({name}, time.monotonic())
                return
            row = session.get(JobRow, jobs[name].job_id)
            if row is not None and row.plan:
                keep: dict[str, object] = {k: row.plan[k] for k in ("solve_ms", "solver", "moved_flows") if k in row.plan}
                row.plan = {**_summary_doc(summary), **keep}

    # --- hooks ------------------------------------------------------------------------------

    def on_link_change(self, session: Session, fabric: Fabric, link: str, state: LinkState) -> int:
        """Re-plan the flows the change broke, in the caller's transaction; returns how many changed."""
        with _gc_paused():
            return self._on_link_change(session, fabric, link, state)

    def _on_link_change(self, session: Session, fabric: Fabric, link: str, state: LinkState) -> int:
        revision = fabric_repo.revision(session) or 0
        if state == LinkState.UP:
            self._reopt_due = True
            # A job that failed for want of a path may have one now: plan it again.
            for row in session.scalars(select(JobRow).where(JobRow.status == JobStatus.FAILED.value)):
                row.status, row.error, row.updated_at_us = JobStatus.PENDING.value, None, now_us()
        cands = self.candidates(session, fabric, revision, link_change=True)
        jobs = {n: j for n, j in self.load(session).items() if j.status == JobStatus.PLANNED.value}
        active = {n: ActiveJob(j.flows, j.assignments) for n, j in jobs.items()}
        previous = {n: PlanSummary(**doc) for n, doc in session.execute(
            select(JobRow.name, JobRow.plan).where(JobRow.status == JobStatus.PLANNED.value)) if doc}
        kept = self._index
        index = kept[1] if kept is not None and kept[0] == _index_key(jobs) else None
        plans, after = replan_indexed(fabric, active, cands, previous, carry_bound=state != LinkState.UP, index=index,
                                      stale=self.stale_summaries(jobs))
        total = 0
        for n in sorted(plans):
            total += self.write(session, n, jobs[n], plans[n], cands.view, f"link {link} {state.value}")
        # Summaries to refresh once committed: the re-planned jobs', and everyone's when flows
        # moved (they are the other jobs' background) or a link came up (optima may fall).
        # Until then the stored bound of a job that was not re-planned may overstate its
        # optimum in those cases: it is lowered to the NIC pigeonhole bound, proven always.
        changed_under = (any(p.moved or p.summary is None for p in plans.values())  # moved, or failed
                         or state == LinkState.UP)
        refresh = set(jobs) if changed_under else set(plans)
        if changed_under:
            demand = after.demand if after is not None else job_demands(fabric, active)
            for n in set(jobs) - set(plans):
                stored = session.get(JobRow, jobs[n].job_id)
                if stored is None or not stored.plan:
                    continue
                count = after.nics[n] if after is not None else count_by_nic(jobs[n].flows)
                floor = round(pigeonhole(cands, count, demand), 9)
                if floor < stored.plan.get("lower_bound", 0.0):
                    stored.plan = {**stored.plan, "lower_bound": floor}
        if refresh:
            due = time.monotonic() + REFRESH_DELAY_S
            _on_commit(session, lambda: self._schedule_refresh(refresh, due))
        # The index of the plans just written, kept once they are committed (else the worker
        # rebuilds one).
        if after is not None:
            versions = {n: (j.job_id, j.version) for n, j in jobs.items()}
            for n in plans:
                written = session.get(JobRow, jobs[n].job_id)
                if written is not None:
                    versions[n] = (written.id, written.version)
            ready = (tuple((n, *versions[n]) for n in sorted(versions)), after)
            _on_commit(session, lambda: setattr(self, "_index", ready))
        return total  # the caller wakes the workers after the commit (summary refresh)

    def on_fabric_replaced(self, session: Session, fabric: Fabric) -> None:
        """A new fabric: every active job is planned again from scratch."""
        for row in session.scalars(select(JobRow).where(JobRow.status.in_(ACTIVE))):
            session.execute(delete(FlowRow).where(FlowRow.job_id == row.id))
            if row.status == JobStatus.PLANNED.value:
                row.version += 1  # its assignments are gone until the new plan
            row.status, row.updated_at_us = JobStatus.PENDING.value, now_us()
        self._loaded.clear()


_gc_lock = threading.Lock()
_gc_holders = [0, False]  # threads inside `_gc_paused`, and whether the collector was on before


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while planning: a plan allocates hundreds of thousands
    of short-lived acyclic objects, and with 16k flows' plans alive each full collection
    scans them all (a third of a link re-plan's time). Reference counting still frees them."""
    with _gc_lock:
        if _gc_holders[0] == 0:
            _gc_holders[1] = gc.isenabled()
            gc.disable()
        _gc_holders[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders[0] -= 1
            if _gc_holders[0] == 0 and _gc_holders[1]:
                gc.enable()


_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_NEEDS_ESCAPE = re.compile(r'[^\x20-\x21\x23-\x5b\x5d-\x7e]')  # JSON escapes these (ensure_ascii)


def _json_strings(items: object) -> object:
    """A list of names as compact JSON, exactly as `json` writes it: joined directly when no
    name needs escaping (printable ASCII, no quote or backslash), else by `json`. A plan's
    rows hold one path and one link list per flow: 32k encodings at 16k flows."""
    if (isinstance(items, list) and items and all(isinstance(x, str) for x in items)
            and not _NEEDS_ESCAPE.search("".join(items))):
        return '["' + '","'.join(items) + '"]'
    return _ENCODE(items)


def _on_commit(session: Session, action: Callable[[], object]) -> None:
    """Run `action` when the session's transaction commits (never, if it rolls back)."""
    event.listen(session, "after_commit", lambda _session: action(), once=True)


def _index_key(jobs: dict[str, Loaded]) -> tuple[tuple[str, int, int], ...]:
    return tuple((n, jobs[n].job_id, jobs[n].version) for n in sorted(jobs))


def _planned_set(jobs: dict[str, Loaded]) -> frozenset[tuple[str, int]]:
    return frozenset((n, j.job_id) for n, j in jobs.items() if j.status == JobStatus.PLANNED.value)


def conn_is_sqlite(session: Session) -> bool:
    return session.connection().dialect.name == "sqlite"


def _same_but_link_states(a: Fabric, b: Fabric) -> bool:
    """Whether two fabrics differ at most in link states (then source ports may carry over)."""
    if a.switches != b.switches or a.hosts != b.hosts or a.hashing != b.hashing or len(a.links) != len(b.links):
        return False
    return all(x is y or replace(x, state=LinkState.UP) == replace(y, state=LinkState.UP)
               for x, y in zip(a.links, b.links, strict=True))  # `with_link_state` shares the others


def _summary_doc(s: PlanSummary) -> dict[str, object]:
    return asdict(s)


def install(rt: Runtime) -> Planner:
    """Register the planner worker and hooks on the runtime (once per runtime)."""
    planner = Planner(rt)
    rt.on_link_change[:] = [h for h in rt.on_link_change if not isinstance(getattr(h, "__self__", None), Planner)]
    rt.on_fabric_replaced[:] = [h for h in rt.on_fabric_replaced
                                if not isinstance(getattr(h, "__self__", None), Planner)]
    rt.on_link_change.append(planner.on_link_change)
    rt.on_fabric_replaced.append(planner.on_fabric_replaced)
    rt.workers[:] = [w for w in rt.workers if w.name != "planner"] + [
        PeriodicWorker("planner", WORKER_INTERVAL_S, planner.step)]
    return planner
