"""The telemetry inbox and the ownership of its shards (PostgreSQL; services.telemetry).

Every replica appends accepted telemetry to `telemetry_inbox`, one row per shard a batch
touches; the replica that owns a shard reads that shard's rows. Ownership is PostgreSQL's
session advisory lock `(SHARD_CLASS, shard)` held on one connection per replica, so it ends
with the replica's database session (kill -9 included); membership is a shared advisory lock
`(MEMBER_CLASS, 0)` every running replica holds, so the replicas count themselves in
`pg_locks` without a table of their own. A connection's `application_name` names its replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.orm import Session

from controller.store.tables import TelemetryInboxRow

SHARD_CLASS = 0x63345348  # "c4SH"
MEMBER_CLASS = 0x63344D42  # "c4MB"


def append(session: Session, rows: Iterable[tuple[int, int, str, int, str]]) -> None:
    """Rows of (shard, arrival_us, host, record count, body)."""
    session.add_all([TelemetryInboxRow(shard=shard, arrival_us=arrival, host=host, records=n, body=body)
                     for shard, arrival, host, n, body in rows])


def since(session: Session, shards: Sequence[int], after_us: int, limit: int) -> list[tuple[int, int, int, str, int, str]]:
    """Rows of `shards` that arrived after `after_us`, oldest first:
    (id, shard, arrival_us, host, records, body)."""
    if not shards:
        return []
    t = TelemetryInboxRow
    return [tuple(r) for r in session.execute(  # type: ignore[misc]
        select(t.id, t.shard, t.arrival_us, t.host, t.records, t.body)
        .where(t.shard.in_(list(shards)), t.arrival_us > after_us)
        .order_by(t.arrival_us, t.id).limit(limit))]


def prune(session: Session, shards: Sequence[int], before_us: int) -> int:
    """Delete the rows of `shards` that arrived before `before_us`; returns how many."""
    if not shards:
        return 0
    result = session.execute(delete(TelemetryInboxRow).where(TelemetryInboxRow.shard.in_(list(shards)),
                                                             TelemetryInboxRow.arrival_us < before_us))
    return int(result.rowcount)  # type: ignore[attr-defined]


def backlog(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(TelemetryInboxRow)) or 0)


# Ownership: advisory locks on one connection a replica holds open.

def name_connection(conn: Connection, name: str) -> None:
    conn.execute(text("SELECT set_config('application_name', :n, false)"), {"n": name[:63]})


def join(conn: Connection) -> None:
    """Count this replica among the members (until its session ends)."""
    conn.execute(text("SELECT pg_advisory_lock_shared(CAST(:c AS integer), 0)"), {"c": MEMBER_CLASS})


def members(conn: Connection) -> int:
    """How many replicas hold the membership lock now (this one included once it joined)."""
    return int(conn.execute(text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
        " AND classid = :c AND objid = 0"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
        {"c": MEMBER_CLASS}).scalar() or 0)


def owners(conn: Connection) -> dict[int, str]:
    """Shard -> the application name of the replica whose session holds it."""
    rows = conn.execute(text(
        "SELECT l.objid::int, coalesce(a.application_name, '') FROM pg_locks l"
        " LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = :c"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
        {"c": SHARD_CLASS})
    return {int(shard): str(name) for shard, name in rows}


def try_take(conn: Connection, shard: int) -> bool:
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(CAST(:c AS integer), CAST(:s AS integer))"), {"c": SHARD_CLASS, "s": shard}).scalar())


def release(conn: Connection, shard: int) -> None:
    conn.execute(text("SELECT pg_advisory_unlock(CAST(:c AS integer), CAST(:s AS integer))"), {"c": SHARD_CLASS, "s": shard})
