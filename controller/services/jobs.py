"""Job use cases: register, read, list, delete a job, and read its assignments.

Registering checks the spec against the stored fabric (422 naming the field), refuses a job
naming an isolated host or an existing name (409), stores the job as `pending` and wakes the
planner; planning itself happens in `services.planning`, never inside the request. Posting
and deleting take the fabric's lock first and run the `on_jobs_changed` hooks before they
commit: a job changes every other job's demand (API.md counts all active jobs), and the
planner lowers the stored bounds that change may have made too high in the same transaction.
Deleting a job removes its flows in the same transaction, so its load is gone at once.
Long-polling the assignments is the API's (`api.routes.jobs`), which holds no thread while
it waits.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Collection
from typing import Any

from sqlalchemy.orm import Session

from controller.domain.jobs import JobDiagnosis, JobSpec, Pattern, RankSpec, TrafficSpec
from controller.services import topology
from controller.services.clock import now_us
from controller.services.errors import Conflict, Invalid, NotFound, Unavailable
from controller.services.runtime import Runtime
from controller.store import fabric_repo, flows_repo, hosts_repo, jobs_repo
from controller.store.db import transaction
from controller.store.tables import JobRow
from controller.te import flows as job_flows
from controller.te.carry import nic_ports, pigeonhole, shown_bound
from controller.te.instance import count_by_nic, demands_gbps

ACTIVE = jobs_repo.ACTIVE
POLL_S = 0.1  # how often waiting long-polls' versions are read, in one query (api.longpoll)
READ_TRIES = 5  # reads of a job's head and documents until both heads agree (`_head_and_documents`)


def spec_to_document(spec: JobSpec) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": spec.name,
        "ranks": [{"rank": r.rank, "host": r.host, "nic": r.nic} for r in spec.ranks],
        "traffic": [{"pattern": t.pattern.value, "ranks": list(t.ranks), "pairs": [list(p) for p in t.pairs],
                     "channels": t.channels, "qps_per_connection": t.qps_per_connection,
                     "bytes_per_iteration": t.bytes_per_iteration} for t in spec.traffic],
    }
    if spec.diagnosis is not None:  # the job's own C4D settings (None: the defaults)
        doc["diagnosis"] = {k: v for k, v in dataclasses.asdict(spec.diagnosis).items() if v is not None}
    if not spec.rebalance:  # the job opted out of rebalancing (absent: on)
        doc["rebalance"] = False
    return doc


def spec_from_document(doc: dict[str, Any]) -> JobSpec:
    return JobSpec(
        name=doc["name"],
        ranks=tuple(RankSpec(int(r["rank"]), r["host"], r["nic"]) for r in doc["ranks"]),
        traffic=tuple(TrafficSpec(Pattern(t["pattern"]), tuple(t.get("ranks") or ()),
                                  tuple((int(a), int(b)) for a, b in t.get("pairs") or ()),
                                  int(t.get("channels", 1)), int(t.get("qps_per_connection", 1)),
                                  t.get("bytes_per_iteration")) for t in doc["traffic"]),
        diagnosis=JobDiagnosis(**doc["diagnosis"]) if isinstance(doc.get("diagnosis"), dict) else None,
        rebalance=doc.get("rebalance", True) is not False,
    )


def public(row: JobRow, bounds: Bounds | None = None) -> dict[str, Any]:
    plan = bounds.plan(row) if bounds is not None else row.plan
    out: dict[str, Any] = {**row.spec, "status": row.status, "version": row.version, "plan": plan,
                           "created_at_us": row.created_at_us, "updated_at_us": row.updated_at_us}
    if row.progress:
        out["progress"] = row.progress
    if row.error:
        out["error"] = row.error
    if row.flagged:
        out["flagged"], out["flag_reason"] = True, row.flag_reason
    return out


_COUNTS: dict[tuple[int, str, int], Counter[tuple[str, str]]] = {}
_COUNTS_LOCK = threading.Lock()
_COUNTS_KEPT = 8192


def flow_counts(row: JobRow) -> Counter[tuple[str, str]]:
    """The job's flows per source NIC, derived from its spec (kept per job: specs never
    change). Raises KeyError/TypeError/ValueError for a spec no POST made."""
    key = (row.id, row.name, row.created_at_us)
    with _COUNTS_LOCK:
        hit = _COUNTS.get(key)
    if hit is None:
        hit = count_by_nic(job_flows.derive_flows(spec_from_document(dict(row.spec))))
        with _COUNTS_LOCK:
            if len(_COUNTS) >= _COUNTS_KEPT:
                _COUNTS.clear()
            _COUNTS[key] = hit
    return hit


class Bounds:
    """Shows each stored plan's `lower_bound` as proven now: the stored figure was proven at
    the job's bound epoch; jobs posted and deleted since lowered it (`te.carry.shown_bound`)
    without rewriting it. One per read (one epoch, one read of the flows per NIC)."""

    def __init__(self, rt: Runtime, session: Session) -> None:
        self.rt, self.session = rt, session
        self.epoch = jobs_repo.bound_epoch(session) or jobs_repo.START
        self._floor_inputs: tuple[Any, Any, dict[tuple[str, str], int]] | None = None

    def plan(self, row: JobRow) -> dict[str, Any] | None:
        plan = row.plan
        if not plan or not isinstance(plan.get("lower_bound"), int | float):
            return plan
        then = jobs_repo.job_epoch(row)
        dropped, ratio = self.epoch.drops > then.drops, self.epoch.log_scale - then.log_scale
        if not dropped and ratio >= 0.0:
            return plan
        return {**plan, "lower_bound": shown_bound(float(plan["lower_bound"]), ratio, dropped, self._floor(row))}

    def _floor(self, row: JobRow) -> float:
        """The pigeonhole bound of the job now (0.0 when it cannot be computed)."""
        if self._floor_inputs is None:
            got = self.rt.fabric_cache.current(self.session)
            if got is None:
                return 0.0
            self._floor_inputs = (got[2], nic_ports(got[2]), jobs_repo.nic_flows(self.session))
        view, ports, totals = self._floor_inputs
        try:
            counts = flow_counts(row)
            demand = demands_gbps(view.fabric, {n: totals.get(n, 0) for n in counts})
            return pigeonhole(view, counts, demand, ports)
        except (KeyError, TypeError, ValueError):
            return 0.0


def _changed(rt: Runtime, session: Session, posted: JobRow | None, deleted: JobRow | None) -> None:
    for hook in rt.on_jobs_changed:
        hook(session, posted, deleted)


def create(rt: Runtime, spec: JobSpec) -> dict[str, Any]:
    """One transaction (issue 18: a POST's statements under the fabric's lock are what limit
    the rate of POSTs and DELETEs, which serialize on it): the fabric's revision (the cached
    fabric it names checks the spec) is read before the lock; under it, the job's INSERT (the
    unique name refuses a taken one), the job's hosts' isolation (isolating a host takes the
    lock too, so a host isolated while this POST waited for it is seen: read before the lock,
    such a job was accepted, never flagged, and planned through the host) and the hooks' two
    statements."""
    with transaction(rt.sessions) as session:
        fabric, _ = topology.current_in(rt, session)
        found = job_flows.problems(spec, fabric)
        if found:
            raise Invalid(found)
        document = spec_to_document(spec)
        fabric_repo.lock(session)
        try:
            row = jobs_repo.add(session, spec.name, document, now_us())
        except jobs_repo.NameTaken:
            raise Conflict(f"a job named {spec.name!r} exists", {"job": spec.name}) from None
        isolated = sorted(hosts_repo.isolated_among(session, job_flows.hosts_of(spec)))
        if isolated:  # (the transaction's rollback takes the INSERT back)
            raise Conflict(f"the job uses isolated host(s): {', '.join(isolated)}", {"hosts": isolated})
        _changed(rt, session, row, None)
        doc = public(row)
    rt.wake_workers()
    return doc


def _row(session: Session, name: str) -> JobRow:
    row = jobs_repo.by_name(session, name)
    if row is None:
        raise NotFound(f"no job named {name!r}", {"job": name})
    return row


def get(rt: Runtime, name: str) -> dict[str, Any]:
    with rt.sessions() as session:
        return public(_row(session, name), Bounds(rt, session))


def list_jobs(rt: Runtime, status: str | None = None) -> list[dict[str, Any]]:
    with rt.sessions() as session:
        bounds = Bounds(rt, session)
        return [public(r, bounds) for r in jobs_repo.listed(session, status)]


def delete_job(rt: Runtime, name: str) -> None:
    with transaction(rt.sessions) as session:
        fabric_repo.lock(session)
        row = _row(session, name)
        _changed(rt, session, None, row)
        jobs_repo.delete(session, row)
    rt.wake_workers()
    rt.versions_changed()  # its long-polls answer 404 at once


def _consistent(session: Session, names: Collection[str], host: str | None = None
                ) -> tuple[dict[str, tuple[jobs_repo.JobState, list[dict[str, Any]]]], list[str]]:
    """The named jobs' (id, version, status) and their flows' documents (of flows sourced on
    `host` if given), each job's as of one state, in three queries for all of them: the heads,
    every flow, the heads again. They are separate statements, and under PostgreSQL's READ
    COMMITTED each sees its own snapshot: a plan (or a plan failure) committed between them
    would pair the old version and status with the new flows. A job whose two heads differ is
    read again (every change of the flows changes the version or the status), up to
    `READ_TRIES` reads. Returns the jobs read (a job that does not exist is not there) and
    those still changing after the last read."""
    out: dict[str, tuple[jobs_repo.JobState, list[dict[str, Any]]]] = {}
    todo = sorted(set(names))
    for _ in range(READ_TRIES):
        if not todo:
            break
        heads = jobs_repo.heads_of(session, todo)
        every = flows_repo.documents_of(session, [h.id for h in heads.values()], host)
        again = jobs_repo.heads_of(session, list(heads))
        todo = []
        for name, head in heads.items():
            if again.get(name) == head:
                out[name] = head, every[head.id]
            else:
                todo.append(name)
    return out, todo


def _head_and_documents(session: Session, name: str, host: str | None = None
                        ) -> tuple[jobs_repo.JobState, list[dict[str, Any]]]:
    """`_consistent` of one job: NotFound if there is no such job, Unavailable if it changed
    during every read."""
    got, moving = _consistent(session, [name], host)
    if name in got:
        return got[name]
    if moving:
        raise Unavailable(f"job {name!r} changed during {READ_TRIES} reads in a row; try again",
                          {"job": name})
    raise NotFound(f"no job named {name!r}", {"job": name})


def assignments_by_host(rt: Runtime, name: str) -> tuple[jobs_repo.JobState, dict[str | None, dict[str, Any]]]:
    """`assignments` of every host that sources a flow of the job, and of the whole job (key
    None), read at once (one query for the flows), with the (id, version, status) they were
    read at; a host missing here sources none of its flows."""
    with rt.sessions() as session:
        head, every = _head_and_documents(session, name)
    return head, _by_host(name, head, every)


def assignments_by_host_many(rt: Runtime, names: Collection[str]
                             ) -> dict[str, tuple[jobs_repo.JobState, dict[str | None, dict[str, Any]]]]:
    """`assignments_by_host` of many jobs in one session and three queries for all of them
    (`_consistent`; `api.longpoll` fills its cold cache with it). A job that does not exist, or
    still moved after `READ_TRIES` reads, is left out (its single read then says NotFound or
    Unavailable)."""
    with rt.sessions() as session:
        got, _ = _consistent(session, names)
    return {name: (head, _by_host(name, head, every)) for name, (head, every) in got.items()}


def _by_host(name: str, head: jobs_repo.JobState, every: list[dict[str, Any]]) -> dict[str | None, dict[str, Any]]:
    """The job's assignments documents: of the whole job (key None), and of each host that
    sources a flow of it."""
    per_host: dict[str | None, list[dict[str, Any]]] = {None: every}
    for a in every:  # (in flow order, as `documents` sorts them)
        per_host.setdefault(a["src_host"], []).append(a)
    return {host: {"job": name, "version": head.version, "status": head.status, "assignments": docs}
            for host, docs in per_host.items()}


def heads_of(rt: Runtime, names: list[str]) -> dict[str, jobs_repo.JobState]:
    """Name -> (id, version, status) of the named jobs that exist (one query)."""
    with rt.sessions() as session:
        return jobs_repo.heads_of(session, names)


def version(rt: Runtime, name: str) -> int:
    """The job's assignment version (NotFound if there is no such job)."""
    with rt.sessions() as session:
        return _row(session, name).version


def assignments(rt: Runtime, name: str, host: str | None = None) -> dict[str, Any]:
    """The job's assignments (of flows sourced on `host` if given), sorted by flow."""
    with rt.sessions() as session:  # (not the spec's and plan's JSON: agents read this often)
        head, docs = _head_and_documents(session, name, host)
        return {"job": name, "version": head.version, "status": head.status, "assignments": docs}


DEMO_JOBS = (("demo-a", 0, 16), ("demo-b", 16, 16))  # (name, first host, ranks): host{first + r}


def seed_demo_jobs(rt: Runtime, demo_jobs: tuple[tuple[str, int, int], ...] = DEMO_JOBS) -> list[str]:
    """`c4 demo`: register two ring jobs on the demo fabric unless jobs exist; returns their names."""
    with rt.sessions() as session:
        if jobs_repo.any_job(session):
            return []
    names = []
    for name, first, n in demo_jobs:
        ranks = tuple(RankSpec(r, f"host{first + r}", "mlx5_0") for r in range(n))
        create(rt, JobSpec(name, ranks, (TrafficSpec(Pattern.RING, tuple(range(n)), channels=2, qps_per_connection=2),)))
        names.append(name)
    return names
