"""Flow rows: the one owner of reads and writes of the `flows` table.

One row per network flow of a planned job, holding its assignment (API.md's fields: NIC
ports and addresses, UDP source port, weight, node path and link names). Rows are written
whole when a job is first planned (`insert`), rewritten in their route columns when a plan
changes them (`update_routes`: moves, new source ports, new weights), and deleted with the
job or when it loses its plan. Port node names are built by `topology.names.port_node`.

A 16k-flow plan is written in ~0.1 s: on SQLite the rows go straight through the driver
with each distinct path's JSON encoded once (`json_strings`); SQLAlchemy's per-value
processing was most of the cost. Functions take the caller's session and never commit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, cast

from sqlalchemy import Table, delete, select, update
from sqlalchemy import insert as sql_insert
from sqlalchemy.orm import Session

from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.store.tables import FlowRow
from controller.topology.graph import FabricView
from controller.topology.names import port_node

COLUMNS = ("job_id", "src_rank", "dst_rank", "channel", "qp", "src_host", "src_nic", "dst_host", "dst_nic",
           "src_port", "src_address", "dst_port", "dst_address", "udp_sport", "weight", "path", "links")
ROUTE_COLUMNS = ("src_port", "src_address", "dst_port", "dst_address", "udp_sport", "weight", "path", "links")
# What the detectors read of a flow (`planned_routes`), in this order.
PLANNED_ROUTE_COLUMNS = (FlowRow.src_rank, FlowRow.dst_rank, FlowRow.src_host, FlowRow.src_nic, FlowRow.src_port,
                         FlowRow.dst_host, FlowRow.dst_nic, FlowRow.dst_port, FlowRow.path, FlowRow.links,
                         FlowRow.udp_sport)

_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_NEEDS_ESCAPE = re.compile(r'[^\x20-\x21\x23-\x5b\x5d-\x7e]')  # JSON escapes these (ensure_ascii)


def json_strings(items: object) -> object:
    """A list of names as compact JSON, exactly as `json` writes it: joined directly when no
    name needs escaping (printable ASCII, no quote or backslash), else by `json`. A plan's
    rows hold one path and one link list per flow: 32k encodings at 16k flows."""
    if (isinstance(items, list) and items and all(isinstance(x, str) for x in items)
            and not _NEEDS_ESCAPE.search("".join(items))):
        return '["' + '","'.join(items) + '"]'
    return _ENCODE(items)


def _sqlite(session: Session) -> bool:
    return session.connection().dialect.name == "sqlite"


def _tuples(job_id: int, flows: Iterable[Flow], plan: Mapping[FlowKey, Assignment], view: FabricView,
            encode: Callable[[object], object]) -> list[tuple[object, ...]]:
    """Flow rows as value tuples in `COLUMNS` order; `encode` maps a path or links list
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


def insert(session: Session, job_id: int, flows: list[Flow], plan: Mapping[FlowKey, Assignment],
           view: FabricView) -> dict[FlowKey, int]:
    """Write the rows of a job's first plan; returns their row ids on SQLite (read through
    the driver in a few ms), {} elsewhere (`row_ids` reads them later)."""
    if not flows:
        return {}
    if not _sqlite(session):
        rows = [dict(zip(COLUMNS, t, strict=True)) for t in _tuples(job_id, flows, plan, view, lambda x: x)]
        session.execute(sql_insert(cast(Table, FlowRow.__table__)), rows)
        return {}
    sql = f"INSERT INTO flows ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
    session.connection().exec_driver_sql(sql, _tuples(job_id, flows, plan, view, json_strings))
    return row_ids(session, job_id)


def update_routes(session: Session, job_id: int, flows: list[Flow], ids: Mapping[FlowKey, int],
                  plan: Mapping[FlowKey, Assignment], view: FabricView) -> None:
    """Rewrite the route columns (`ROUTE_COLUMNS`) of existing rows: on SQLite straight
    through the driver, else a Core bulk update by primary key."""
    at = [COLUMNS.index(c) for c in ROUTE_COLUMNS]
    if not _sqlite(session):
        values = []
        for t, f in zip(_tuples(job_id, flows, plan, view, lambda x: x), flows, strict=True):
            values.append({"id": ids[f.key], **{c: t[i] for c, i in zip(ROUTE_COLUMNS, at, strict=True)}})
        if values:
            session.execute(update(FlowRow), values)
        return
    values_t = [(*(t[i] for i in at), ids[f.key])
                for t, f in zip(_tuples(job_id, flows, plan, view, json_strings), flows, strict=True)]
    session.connection().exec_driver_sql(
        f"UPDATE flows SET {', '.join(c + ' = ?' for c in ROUTE_COLUMNS)} WHERE id = ?", values_t)


def row_ids(session: Session, job_id: int) -> dict[FlowKey, int]:
    if _sqlite(session):  # straight through the driver: 16k rows in a few ms
        rows = session.connection().exec_driver_sql(
            "SELECT id, src_rank, dst_rank, channel, qp FROM flows WHERE job_id = ?", (job_id,))
        return {FlowKey(a, b, c, q): i for i, a, b, c, q in rows}
    return {FlowKey(a, b, c, q): i for i, a, b, c, q in session.execute(
        select(FlowRow.id, FlowRow.src_rank, FlowRow.dst_rank, FlowRow.channel, FlowRow.qp)
        .where(FlowRow.job_id == job_id))}


def row_ids_of(session: Session, job_ids: list[int]) -> dict[int, dict[FlowKey, int]]:
    """`row_ids` of several jobs in one query per 500 jobs (a job with no rows: absent)."""
    out: dict[int, dict[FlowKey, int]] = {}
    for at in range(0, len(job_ids), 500):
        for i, j, a, b, c, q in session.execute(
                select(FlowRow.id, FlowRow.job_id, FlowRow.src_rank, FlowRow.dst_rank, FlowRow.channel, FlowRow.qp)
                .where(FlowRow.job_id.in_(job_ids[at:at + 500]))):
            out.setdefault(j, {})[FlowKey(a, b, c, q)] = i
    return out


def delete_for(session: Session, job_id: int) -> None:
    session.execute(delete(FlowRow).where(FlowRow.job_id == job_id))


def assignments(session: Session, job_id: int) -> tuple[dict[FlowKey, Assignment], dict[FlowKey, int]]:
    """A job's stored assignments and row ids, by flow key."""
    assigned: dict[FlowKey, Assignment] = {}
    ids: dict[FlowKey, int] = {}
    rows = session.execute(select(FlowRow.id, FlowRow.src_rank, FlowRow.dst_rank, FlowRow.channel, FlowRow.qp,
                                  FlowRow.src_host, FlowRow.src_nic, FlowRow.src_port, FlowRow.dst_host,
                                  FlowRow.dst_nic, FlowRow.dst_port, FlowRow.udp_sport, FlowRow.weight,
                                  FlowRow.path, FlowRow.links).where(FlowRow.job_id == job_id))
    for i, a, b, c, q, sh, sn, sp, dh, dn, dp, sport, weight, path, links in rows:
        key = FlowKey(a, b, c, q)
        ids[key] = i
        if path:
            assigned[key] = Assignment(key, port_node(sh, sn, sp or ""), port_node(dh, dn, dp or ""), int(sport or 0),
                                       float(weight or 0.0), tuple(path), tuple(links or ()))
    return assigned, ids


def documents_of(session: Session, job_ids: Collection[int], host: str | None = None) -> dict[int, list[dict[str, Any]]]:
    """API.md's assignment objects of many jobs in one query: job id -> its assignment objects
    (of flows sourced on `host` if given), by flow (an empty list for a job without flows)."""
    out: dict[int, list[dict[str, Any]]] = {i: [] for i in job_ids}
    if out:
        query = select(FlowRow).where(FlowRow.job_id.in_(sorted(out)))
        if host is not None:
            query = query.where(FlowRow.src_host == host)
        rows = session.scalars(query)
        for f in sorted(rows, key=lambda f: (f.job_id, *_flow_order(f))):
            out[f.job_id].append(_document(f))
    return out


def _flow_order(f: FlowRow) -> tuple[int, int, int, int]:
    return f.src_rank, f.dst_rank, f.channel, f.qp


def _document(f: FlowRow) -> dict[str, Any]:
    return {"src_rank": f.src_rank, "dst_rank": f.dst_rank, "channel": f.channel, "qp": f.qp,
            "src_host": f.src_host, "src_nic": f.src_nic, "src_port": f.src_port, "src_address": f.src_address,
            "dst_host": f.dst_host, "dst_nic": f.dst_nic, "dst_port": f.dst_port, "dst_address": f.dst_address,
            "udp_sport": f.udp_sport, "weight": f.weight, "path": f.path, "links": f.links}


def planned_routes(session: Session, job_id: int) -> Iterable[tuple[Any, ...]]:
    """The detectors' view of a job's flows: `PLANNED_ROUTE_COLUMNS` per row (columns, not
    ORM rows: a 16k-flow job reloads in a few tens of ms)."""
    return session.execute(select(*PLANNED_ROUTE_COLUMNS).where(FlowRow.job_id == job_id))


def used_links(session: Session, job_id: int) -> set[str]:
    """Names of every link a job's stored flows cross."""
    out: set[str] = set()
    for (links,) in session.execute(select(FlowRow.links).where(FlowRow.job_id == job_id)):
        out.update(links or ())
    return out
