"""Probe results (the `probes` table): one row per (src, dst, protocol, dst_port, sport), the
latest report winning, and the fabric's hashing protocol and port they are read against."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from controller.store.tables import FabricRow, ProbeRow

_CHUNK = 500  # bound parameters per statement (SQLite allows 32,766; PostgreSQL 65,535)


def hashing(session: Session) -> tuple[str, int] | None:
    """The stored fabric's data-flow protocol and destination port, or None without a fabric."""
    row = session.scalar(select(FabricRow))
    return (row.hashing_protocol, row.hashing_dst_port) if row is not None else None


def replace(session: Session, src: str, dst: str, protocol: str, dst_port: int,
            results: Sequence[tuple[int, list[str], list[str] | None]], t_us: int) -> None:
    """Store one report's results `(sport, hops, path or None)`, replacing earlier rows of the
    same 5-tuples; a sport listed twice keeps its last result. Two statements per 500 ports,
    not one round trip per result."""
    latest = {sport: (hops, path) for sport, hops, path in results}
    sports = sorted(latest)
    for i in range(0, len(sports), _CHUNK):
        part = sports[i:i + _CHUNK]
        session.execute(delete(ProbeRow).where(
            ProbeRow.src_address == src, ProbeRow.dst_address == dst, ProbeRow.protocol == protocol,
            ProbeRow.dst_port == dst_port, ProbeRow.sport.in_(part)))
        session.execute(insert(ProbeRow), [
            {"src_address": src, "dst_address": dst, "protocol": protocol, "dst_port": dst_port, "sport": s,
             "hops": list(latest[s][0]), "path": list(p) if (p := latest[s][1]) else None, "t_us": t_us}
            for s in part])


def fresh(session: Session, protocol: str, dst_port: int, oldest_us: int) -> Iterable[tuple[Any, ...]]:
    """(src, dst, sport, path, t_us) of the rows at or after `oldest_us` that map to a path."""
    return session.execute(select(ProbeRow.src_address, ProbeRow.dst_address, ProbeRow.sport, ProbeRow.path,
                                  ProbeRow.t_us).where(ProbeRow.protocol == protocol, ProbeRow.dst_port == dst_port,
                                                       ProbeRow.t_us >= oldest_us, ProbeRow.path.is_not(None)))
