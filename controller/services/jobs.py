"""Job use cases: register, read, list, delete a job, and read its assignments (long-poll).

Registering checks the spec against the stored fabric (422 naming the field), refuses a job
naming an isolated host or an existing name (409), stores the job as `pending` and wakes the
planner; planning itself happens in `services.planning`, never inside the request.
Deleting a job removes its flows in the same transaction, so its load is gone at once.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from controller.domain.jobs import JobDiagnosis, JobSpec, JobStatus, Pattern, RankSpec, TrafficSpec
from controller.services import topology
from controller.services.clock import now_us
from controller.services.errors import Conflict, Invalid, NotFound
from controller.services.runtime import Runtime
from controller.store import hosts_repo
from controller.store.db import transaction
from controller.store.tables import FlowRow, JobRow
from controller.te import flows as job_flows

ACTIVE = (JobStatus.PENDING.value, JobStatus.PLANNED.value)
MAX_WAIT_S = 60.0
POLL_S = 0.1


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
    )


def public(row: JobRow) -> dict[str, Any]:
    out: dict[str, Any] = {**row.spec, "status": row.status, "version": row.version, "plan": row.plan,
                           "created_at_us": row.created_at_us, "updated_at_us": row.updated_at_us}
    if row.error:
        out["error"] = row.error
    if row.flagged:
        out["flagged"], out["flag_reason"] = True, row.flag_reason
    return out


def create(rt: Runtime, spec: JobSpec) -> dict[str, Any]:
    fabric, _ = topology.current(rt)
    found = job_flows.problems(spec, fabric)
    if found:
        raise Invalid(found)
    now = now_us()
    with transaction(rt.sessions) as session:
        if session.scalar(select(JobRow.id).where(JobRow.name == spec.name)) is not None:
            raise Conflict(f"a job named {spec.name!r} exists", {"job": spec.name})
        isolated = sorted(set(job_flows.hosts_of(spec)) & hosts_repo.isolated(session))
        if isolated:
            raise Conflict(f"the job uses isolated host(s): {', '.join(isolated)}", {"hosts": isolated})
        row = JobRow(name=spec.name, spec=spec_to_document(spec), status=JobStatus.PENDING.value, version=0,
                     created_at_us=now, updated_at_us=now)
        session.add(row)
        session.flush()
        doc = public(row)
    rt.wake_workers()
    return doc


def _row(session: Session, name: str) -> JobRow:
    row = session.scalar(select(JobRow).where(JobRow.name == name))
    if row is None:
        raise NotFound(f"no job named {name!r}", {"job": name})
    return row


def get(rt: Runtime, name: str) -> dict[str, Any]:
    with rt.sessions() as session:
        return public(_row(session, name))


def list_jobs(rt: Runtime, status: str | None = None) -> list[dict[str, Any]]:
    with rt.sessions() as session:
        query = select(JobRow).order_by(JobRow.name)
        if status:
            query = query.where(JobRow.status == status)
        return [public(r) for r in session.scalars(query)]


def delete_job(rt: Runtime, name: str) -> None:
    with transaction(rt.sessions) as session:
        row = _row(session, name)
        session.execute(delete(FlowRow).where(FlowRow.job_id == row.id))
        session.delete(row)
    rt.wake_workers()


def _assignment(f: FlowRow) -> dict[str, Any]:
    return {"src_rank": f.src_rank, "dst_rank": f.dst_rank, "channel": f.channel, "qp": f.qp,
            "src_host": f.src_host, "src_nic": f.src_nic, "src_port": f.src_port, "src_address": f.src_address,
            "dst_host": f.dst_host, "dst_nic": f.dst_nic, "dst_port": f.dst_port, "dst_address": f.dst_address,
            "udp_sport": f.udp_sport, "weight": f.weight, "path": f.path, "links": f.links}


def version(rt: Runtime, name: str) -> int:
    """The job's assignment version (NotFound if there is no such job)."""
    with rt.sessions() as session:
        return _row(session, name).version


def assignments(rt: Runtime, name: str, host: str | None = None, after_version: int | None = None,
                wait_s: float = 0.0) -> dict[str, Any]:
    """The job's assignments (of flows sourced on `host` if given), sorted by flow.

    With `after_version`, waits up to `wait_s` seconds for a version above it (long-poll).
    """
    deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
    while True:
        with rt.sessions() as session:
            row = _row(session, name)
            ready = after_version is None or row.version > after_version
            if ready or time.monotonic() >= deadline:
                query = select(FlowRow).where(FlowRow.job_id == row.id)
                if host is not None:
                    query = query.where(FlowRow.src_host == host)
                flows = sorted(session.scalars(query), key=lambda f: (f.src_rank, f.dst_rank, f.channel, f.qp))
                return {"job": row.name, "version": row.version, "status": row.status,
                        "assignments": [_assignment(f) for f in flows]}
        time.sleep(POLL_S)


DEMO_JOBS = (("demo-a", 0, 16), ("demo-b", 16, 16))  # (name, first host, ranks): host{first + r}


def seed_demo_jobs(rt: Runtime, demo_jobs: tuple[tuple[str, int, int], ...] = DEMO_JOBS) -> list[str]:
    """`c4 demo`: register two ring jobs on the demo fabric unless jobs exist; returns their names."""
    with rt.sessions() as session:
        if session.scalar(select(JobRow.id).limit(1)) is not None:
            return []
    names = []
    for name, first, n in demo_jobs:
        ranks = tuple(RankSpec(r, f"host{first + r}", "mlx5_0") for r in range(n))
        create(rt, JobSpec(name, ranks, (TrafficSpec(Pattern.RING, tuple(range(n)), channels=2, qps_per_connection=2),)))
        names.append(name)
    return names
