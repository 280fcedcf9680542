"""Switch port counters, link-direction samples and the congestion detector's states.

The one owner of `switch_port_counters`, `link_samples` and `link_direction_states`. Reads
that a write depends on lock their rows on PostgreSQL (`FOR UPDATE`), so two processes that
ingest polls of the same switch at once serialise; SQLite serialises writers anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from controller.store.tables import LinkDirectionStateRow, LinkSampleRow, SwitchPortCountersRow

PortKey = tuple[str, str]
DirectionKey = tuple[str, str]


def port_counters(session: Session, switches: Iterable[str]) -> dict[PortKey, SwitchPortCountersRow]:
    """The stored counters of every port of these switches, locked for this transaction."""
    names = sorted(set(switches))
    if not names:
        return {}
    rows = session.scalars(select(SwitchPortCountersRow).where(SwitchPortCountersRow.switch.in_(names))
                           .order_by(SwitchPortCountersRow.switch, SwitchPortCountersRow.port)
                           .with_for_update())
    return {(r.switch, r.port): r for r in rows}


def save_port_counters(session: Session, new: Sequence[Mapping[str, Any]], changed: Sequence[Mapping[str, Any]]) -> None:
    """Insert `new` rows and update `changed` ones (dicts of the row's columns)."""
    if new:
        session.execute(insert(SwitchPortCountersRow), list(new))
    if changed:
        session.execute(update(SwitchPortCountersRow), list(changed))


def latest_ports(session: Session, switch: str | None = None) -> list[SwitchPortCountersRow]:
    query = select(SwitchPortCountersRow).order_by(SwitchPortCountersRow.switch, SwitchPortCountersRow.port)
    if switch is not None:
        query = query.where(SwitchPortCountersRow.switch == switch)
    return list(session.scalars(query))


def ports_not_up_since(session: Session, since_us: int) -> list[tuple[str, str, str]]:
    """(switch, port, ifOperStatus) of the ports whose latest sample, at or after `since_us`,
    reported an operational status other than "up"."""
    rows = session.execute(
        select(SwitchPortCountersRow.switch, SwitchPortCountersRow.port, SwitchPortCountersRow.oper_status)
        .where(SwitchPortCountersRow.t_us >= since_us, SwitchPortCountersRow.oper_status.is_not(None),
               SwitchPortCountersRow.oper_status != "up")
        .order_by(SwitchPortCountersRow.switch, SwitchPortCountersRow.port))
    return [(sw, port, str(status)) for sw, port, status in rows]


def oper_reported_since(session: Session, since_us: int) -> bool:
    """Whether any port's latest sample at or after `since_us` carried an operational status."""
    return session.scalar(
        select(SwitchPortCountersRow.switch)
        .where(SwitchPortCountersRow.t_us >= since_us, SwitchPortCountersRow.oper_status.is_not(None))
        .limit(1)) is not None


def switches_reporting_since(session: Session, since_us: int) -> set[str]:
    """Switches with a port polled at or after `since_us`."""
    return set(session.scalars(select(SwitchPortCountersRow.switch).where(SwitchPortCountersRow.t_us >= since_us)
                               .group_by(SwitchPortCountersRow.switch)))


def direction_states(session: Session, links: Iterable[str] | None = None, lock: bool = False,
                     congested_only: bool = False) -> dict[DirectionKey, dict[str, Any]]:
    """The detector's stored state documents, of these links (or all), congested ones only if
    asked."""
    query = select(LinkDirectionStateRow.link, LinkDirectionStateRow.direction, LinkDirectionStateRow.state)
    if congested_only:
        query = query.where(LinkDirectionStateRow.congested.is_(True))
    if links is not None:
        names = sorted(set(links))
        if not names:
            return {}
        query = query.where(LinkDirectionStateRow.link.in_(names))
    if lock:
        query = query.order_by(LinkDirectionStateRow.link, LinkDirectionStateRow.direction).with_for_update()
    return {(link, d): dict(state) for link, d, state in session.execute(query)}


def save_direction_states(session: Session, new: Sequence[Mapping[str, Any]], changed: Sequence[Mapping[str, Any]]) -> None:
    if new:
        session.execute(insert(LinkDirectionStateRow), list(new))
    if changed:
        session.execute(update(LinkDirectionStateRow), list(changed))


def add_samples(session: Session, samples: Sequence[Mapping[str, Any]]) -> None:
    if samples:
        session.execute(insert(LinkSampleRow), list(samples))


def series(session: Session, link: str, since_us: int) -> list[LinkSampleRow]:
    """One link's samples (both directions) at or after `since_us`, oldest first."""
    return list(session.scalars(
        select(LinkSampleRow).where(LinkSampleRow.link == link, LinkSampleRow.t_us >= since_us)
        .order_by(LinkSampleRow.t_us, LinkSampleRow.direction, LinkSampleRow.id)))


def sample_count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(LinkSampleRow)) or 0)


def prune(session: Session, before_us: int, links: Iterable[str]) -> tuple[int, int, int]:
    """Delete samples older than `before_us`, and the states and port counters not updated
    since then or (states) of links no longer in the fabric. Returns the rows deleted."""
    keep = set(links)
    samples = session.execute(delete(LinkSampleRow).where(LinkSampleRow.t_us < before_us))
    gone_links = [link for (link,) in session.execute(select(LinkDirectionStateRow.link).distinct())
                  if link not in keep]
    states = session.execute(delete(LinkDirectionStateRow).where(
        (LinkDirectionStateRow.t_us < before_us) | LinkDirectionStateRow.link.in_(gone_links)))
    ports = session.execute(delete(SwitchPortCountersRow).where(SwitchPortCountersRow.t_us < before_us))
    return (int(samples.rowcount or 0), int(states.rowcount or 0),  # type: ignore[attr-defined]
            int(ports.rowcount or 0))  # type: ignore[attr-defined]


def latest_sample(session: Session, link: str, direction: str) -> LinkSampleRow | None:
    """One link direction's newest sample (the rebalancer reads its raw rates)."""
    return session.scalars(
        select(LinkSampleRow).where(LinkSampleRow.link == link, LinkSampleRow.direction == direction)
        .order_by(LinkSampleRow.t_us.desc(), LinkSampleRow.id.desc()).limit(1)).first()
