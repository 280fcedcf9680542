"""Job rows: the one owner of reads and writes of the `jobs` table.

A job row holds the spec a scheduler posted (as its document), the status (`JobStatus`),
the assignment `version` agents poll, the plan summary (`plan`, API.md's object) and the
planner's progress while it works on the job. Flow rows belong to `flows_repo`; deleting a job
here deletes its flows too. Functions take the caller's session and never commit.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, bindparam, select, tuple_, update
from sqlalchemy import delete as sql_delete
from sqlalchemy import exists as sql_exists
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controller.domain.jobs import JobStatus
from controller.store.tables import BoundEpochRow, JobRow, NicFlowsRow

ACTIVE = (JobStatus.PENDING.value, JobStatus.PLANNED.value)  # API.md: the jobs whose flows count


class BoundEpoch(NamedTuple):
    """The fabric-wide bound epoch (`tables.BoundEpochRow`); (0.0, 0) before it starts."""

    log_scale: float
    drops: int


START = BoundEpoch(0.0, 0)


class JobState(NamedTuple):
    """What decides whether a computed plan or summary still fits the stored state."""

    id: int
    version: int
    status: str


def by_name(session: Session, name: str) -> JobRow | None:
    return session.scalar(select(JobRow).where(JobRow.name == name))


def head(session: Session, name: str) -> JobState | None:
    """(id, version, status) of the named job, without its documents."""
    got = session.execute(select(JobRow.id, JobRow.version, JobRow.status).where(JobRow.name == name)).first()
    return None if got is None else JobState(got[0], got[1], got[2])


def by_id(session: Session, job_id: int) -> JobRow | None:
    return session.get(JobRow, job_id)


def exists(session: Session, name: str) -> bool:
    return session.scalar(select(JobRow.id).where(JobRow.name == name)) is not None


def any_job(session: Session) -> bool:
    return session.scalar(select(JobRow.id).limit(1)) is not None


class NameTaken(Exception):
    """`add`: a job of that name exists (the caller's transaction must be rolled back)."""


def add(session: Session, name: str, spec: dict[str, Any], now_us: int) -> JobRow:
    """A new pending job (flushed: it has its id). Raises `NameTaken` when the name exists
    (the unique name refuses it: no read first)."""
    row = JobRow(name=name, spec=spec, status=JobStatus.PENDING.value, version=0, created_at_us=now_us,
                 updated_at_us=now_us)
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:
        raise NameTaken(name) from exc
    return row


def delete(session: Session, row: JobRow) -> None:
    """The job and its flow rows: one DELETE of the job row (the flows' foreign key cascades,
    on SQLite too: `db` turns foreign keys on)."""
    jobs = cast(Table, JobRow.__table__)
    session.execute(sql_delete(jobs).where(jobs.c.id == row.id))
    session.expunge(row)


def listed(session: Session, status: str | None = None) -> list[JobRow]:
    """Jobs sorted by name, of one status if given."""
    query = select(JobRow).order_by(JobRow.name)
    if status:
        query = query.where(JobRow.status == status)
    return list(session.scalars(query))


def active(session: Session) -> list[JobRow]:
    """Pending and planned jobs, oldest first."""
    return list(session.scalars(select(JobRow).where(JobRow.status.in_(ACTIVE)).order_by(JobRow.id)))


def active_count(session: Session) -> int:
    return len(list(session.scalars(select(JobRow.id).where(JobRow.status.in_(ACTIVE)))))


def active_states(session: Session) -> dict[str, JobState]:
    """Name -> (id, version, status) of every pending and planned job."""
    return {n: JobState(i, v, st) for n, i, v, st in session.execute(
        select(JobRow.name, JobRow.id, JobRow.version, JobRow.status).where(JobRow.status.in_(ACTIVE)))}


def active_specs(session: Session) -> dict[str, tuple[int, dict[str, Any]]]:
    """Name -> (id, spec document) of every pending and planned job."""
    return {n: (i, spec) for n, i, spec in session.execute(
        select(JobRow.name, JobRow.id, JobRow.spec).where(JobRow.status.in_(ACTIVE)))}


def rows_of(session: Session, ids: list[int]) -> list[JobRow]:
    """The given jobs' rows (those that exist), oldest first."""
    if not ids:
        return []
    return list(session.scalars(select(JobRow).where(JobRow.id.in_(ids)).order_by(JobRow.id)))


def specs_of(session: Session, ids: list[int]) -> dict[int, dict[str, Any]]:
    """Row id -> spec document of the given jobs (those that exist)."""
    if not ids:
        return {}
    return {i: spec for i, spec in session.execute(select(JobRow.id, JobRow.spec).where(JobRow.id.in_(ids)))}


def any_planned(session: Session) -> bool:
    """Whether some planned job has a plan summary (one EXISTS, no document read)."""
    return bool(session.scalar(select(sql_exists().where(JobRow.status == JobStatus.PLANNED.value,
                                                         JobRow.plan.is_not(None)))))


def planned_maxima(session: Session) -> dict[str, tuple[int, float | None]]:
    """Name -> (id, the plan's `max_link_utilization`) of every planned job that has a plan:
    one number per job read out of the document by the database (issue 18: not every
    planned job's whole plan document, under the fabric's lock, for each plan written)."""
    value = JobRow.plan["max_link_utilization"].as_float()
    return {n: (i, None if v is None else float(v)) for n, i, v in session.execute(
        select(JobRow.name, JobRow.id, value).where(JobRow.status == JobStatus.PLANNED.value,
                                                   JobRow.plan.is_not(None)))}


def planned_lacking(session: Session, field: str) -> list[tuple[str, int]]:
    """(name, `updated_at_us`: when the plan was written) of every planned job whose plan
    has `field` null or absent, the oldest plan first: one value per job read out of the
    document by the database (a planner taking over finds the summaries that wait for a figure,
    `te.config.Config.ecmp_simulation_later`)."""
    value = JobRow.plan[field].as_float()
    query = (select(JobRow.name, JobRow.updated_at_us)
             .where(JobRow.status == JobStatus.PLANNED.value, JobRow.plan.is_not(None), value.is_(None))
             .order_by(JobRow.updated_at_us, JobRow.id))
    return [(n, int(t)) for n, t in session.execute(query)]


def plans_of(session: Session, ids: list[int]) -> dict[int, dict[str, Any]]:
    """Id -> plan document of the given jobs (those that have one)."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in range(0, len(ids), 500):
        out.update({i: doc for i, doc in session.execute(
            select(JobRow.id, JobRow.plan).where(JobRow.id.in_(ids[chunk:chunk + 500]))) if doc})
    return out


def set_plans(session: Session, plans: dict[int, dict[str, Any]]) -> None:
    """Replace the plan summaries of the given jobs (by row id) in one bulk update."""
    if plans:
        session.execute(update(JobRow), [{"id": i, "plan": doc} for i, doc in plans.items()])


def named(session: Session, status: str) -> list[str]:
    """Names of the jobs of one status, oldest first."""
    return list(session.scalars(select(JobRow.name).where(JobRow.status == status).order_by(JobRow.id)))


def with_status(session: Session, status: str) -> list[JobRow]:
    return list(session.scalars(select(JobRow).where(JobRow.status == status).order_by(JobRow.id)))


def summaries(session: Session) -> dict[str, dict[str, Any]]:
    """Name -> stored plan summary of every planned job that has one."""
    return {n: doc for n, doc in session.execute(
        select(JobRow.name, JobRow.plan).where(JobRow.status == JobStatus.PLANNED.value)) if doc}


def versions(session: Session) -> dict[str, int]:
    """Name -> assignment version of every job."""
    return {n: v for n, v in session.execute(select(JobRow.name, JobRow.version))}


def heads_of(session: Session, names: Collection[str]) -> dict[str, JobState]:
    """Name -> (id, version, status) of the named jobs that exist (one query)."""
    if not names:
        return {}
    query = select(JobRow.name, JobRow.id, JobRow.version, JobRow.status).where(JobRow.name.in_(sorted(names)))
    return {n: JobState(i, v, s) for n, i, v, s in session.execute(query)}


def ranks(session: Session) -> dict[str, dict[str, Any]]:
    """Name -> spec document of every job."""
    return {n: spec for n, spec in session.execute(select(JobRow.name, JobRow.spec))}


def spec_of(session: Session, name: str) -> dict[str, Any] | None:
    """A job's spec as posted (None: no such job)."""
    return session.scalar(select(JobRow.spec).where(JobRow.name == name))


def id_and_spec(session: Session, name: str) -> tuple[int, dict[str, Any]] | None:
    got = session.execute(select(JobRow.id, JobRow.spec).where(JobRow.name == name)).one_or_none()
    return None if got is None else (got[0], got[1])


def set_progress(session: Session, job_id: int, progress: dict[str, Any] | None) -> bool:
    """Record the planner's phase on a pending job (False: the job is gone or not pending)."""
    row = session.get(JobRow, job_id)
    if row is None or row.status != JobStatus.PENDING.value:
        return False
    row.progress = progress
    return True


# --- the bound epoch and flows per NIC (the one owner of `bound_epoch` and `nic_flows`) -------

def bound_epoch(session: Session) -> BoundEpoch | None:
    """The current bound epoch (None: not started; it reads as `START`)."""
    got = session.execute(select(BoundEpochRow.log_scale, BoundEpochRow.drops).where(BoundEpochRow.id == 1)).first()
    return None if got is None else BoundEpoch(float(got[0]), int(got[1]))


def start_epoch(session: Session, totals: Mapping[tuple[str, str], int]) -> BoundEpoch:
    """Start the epoch at `START` with the given flows per NIC (every active job's). Under the
    fabric's lock (a job POST or DELETE, a planner write)."""
    session.execute(sql_delete(NicFlowsRow))
    session.add_all(NicFlowsRow(host=h, nic=n, flows=k) for (h, n), k in totals.items() if k)
    session.add(BoundEpochRow(id=1, log_scale=START.log_scale, drops=START.drops))
    session.flush()
    return START


_EPOCH = cast(Table, BoundEpochRow.__table__)
# On the table: ~0.15 ms of CPU where the ORM-enabled UPDATE took ~0.85 ms (every job POST and
# DELETE runs it under the fabric's lock); no BoundEpochRow is kept in a session.
_ADVANCE = update(_EPOCH).where(_EPOCH.c.id == 1).values(log_scale=_EPOCH.c.log_scale + bindparam("log_factor"),
                                                         drops=_EPOCH.c.drops + bindparam("drops"))


def advance_epoch(session: Session, log_factor: float, drops: int) -> None:
    """Add ln(demand factor) (<= 0) and planned jobs gone to the started epoch, in one UPDATE."""
    if log_factor or drops:
        advance_started(session, log_factor, drops)


def advance_started(session: Session, log_factor: float, drops: int) -> bool:
    """`advance_epoch`, always one UPDATE; False (nothing changed) when the epoch has not
    started: then the flows per NIC are not kept either (the caller starts it)."""
    result = session.execute(_ADVANCE, {"log_factor": log_factor, "drops": drops})
    return bool(result.rowcount)  # type: ignore[attr-defined]


def job_epoch(row: JobRow) -> BoundEpoch:
    """The epoch the job's stored `lower_bound` was proven at."""
    return BoundEpoch(row.bound_log_scale if row.bound_log_scale is not None else START.log_scale,
                      row.bound_drops if row.bound_drops is not None else START.drops)


def set_job_epoch(row: JobRow, epoch: BoundEpoch | None) -> None:
    row.bound_log_scale, row.bound_drops = (epoch or START).log_scale, (epoch or START).drops


def nic_flows(session: Session, nics: Collection[tuple[str, str]] | None = None) -> dict[tuple[str, str], int]:
    """Flows per source NIC over the active jobs (of the given NICs; None: all, a row per NIC)."""
    query = select(NicFlowsRow.host, NicFlowsRow.nic, NicFlowsRow.flows)
    if nics is not None:
        hosts = sorted({h for h, _ in nics})
        if not hosts:
            return {}
        query = query.where(NicFlowsRow.host.in_(hosts))
        return {(h, n): k for h, n, k in session.execute(query) if (h, n) in nics}
    return {(h, n): k for h, n, k in session.execute(query)}


_NIC_FLOWS = cast(Table, NicFlowsRow.__table__)


def _count_in(dialect: Any) -> Any:
    """Add to a NIC's flows, the row made if there is none, returning the count after."""
    t = _NIC_FLOWS
    stmt = dialect.insert(t)
    return (stmt.on_conflict_do_update(index_elements=[t.c.host, t.c.nic], set_={"flows": t.c.flows + stmt.excluded.flows})
            .returning(t.c.host, t.c.nic, t.c.flows))


# Built once, on the table (not the mapped class) and run as an executemany (one INSERT of
# every row: `insertmanyvalues`): cached compiled, ~0.3 ms of CPU where the ORM-enabled
# multi-VALUES form was compiled each time (~1.1 ms).
_COUNT_IN = {"postgresql": _count_in(postgresql), "sqlite": _count_in(sqlite)}


def add_nic_flows(session: Session, delta: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """Add to the flows per NIC (negative: remove); returns the counts before. Under the
    fabric's lock (no other writer). One INSERT .. ON CONFLICT DO UPDATE .. RETURNING for all
    the NICs (issue 18: a job POST or DELETE holds the fabric's lock while it runs), and a
    DELETE only when a NIC's count reaches 0 (no row stays at 0 or below)."""
    delta = {nic: k for nic, k in delta.items() if k}
    if not delta:
        return {}
    stmt = _COUNT_IN[session.connection().dialect.name]
    after = {(h, n): k for h, n, k in session.execute(
        stmt, [{"host": h, "nic": n, "flows": k} for (h, n), k in sorted(delta.items())])}
    gone = sorted(nic for nic, k in after.items() if k <= 0)
    if gone:
        t = _NIC_FLOWS
        session.execute(sql_delete(t).where(tuple_(t.c.host, t.c.nic).in_(gone)))
    return {nic: max(0, after[nic] - k) for nic, k in delta.items()}
