"""Localisation: which element (link, NIC port, host, rank) explains a set of bad connections.

Every connection (src rank -> dst rank) crosses elements: the two hosts, the two NIC ports and
the links of its planned flows, each in a direction (tx/rx, or a link's "ab"/"ba"). An element
is a candidate when bad connections cross it; it is exonerated by healthy connections that
cross it in a direction in which bad ones do. Candidates are ranked by: not exonerated, most
bad connections explained, fewest healthy crossings, then kind (NIC port before host before
link before rank: the more specific of two equal explanations that a person can act on) and
name. So a bad cell of the rate matrix (a link or a path) lands on the one link the slow
connections share and the healthy ones avoid, and a bad row or column lands on a NIC port or a
host. Without routes (job not planned) only hosts and ranks are candidates. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from controller.diagnosis.routes import Connection, JobRoutes
from controller.domain.alarms import Suspect, SuspectKind

_KIND_ORDER = {
    SuspectKind.NIC_PORT: 0,
    SuspectKind.HOST: 1,
    SuspectKind.LINK: 2,
    SuspectKind.RANK: 3,
}
MAX_SUSPECTS = 5

Element = tuple[SuspectKind, str]


@dataclass(slots=True)
class _Tally:
    bad: set[Connection] = field(default_factory=set)
    bad_dirs: set[str] = field(default_factory=set)
    good_by_dir: dict[str, set[Connection]] = field(default_factory=dict)

    def exonerations(self, directed: bool) -> int:
        cleared: set[Connection] = set()
        for direction, conns in self.good_by_dir.items():
            same_way = direction in self.bad_dirs or "" in self.bad_dirs or direction == ""
            if same_way or not directed:
                cleared |= conns
        return len(cleared)


def crossings(
    conn: Connection, routes: JobRoutes | None, rank_hosts: Mapping[int, str],
    sports: Set[int] = frozenset(),
) -> set[tuple[Element, str]]:
    """The (element, direction) pairs a connection crosses; with `sports`, only through its
    planned flows of those source ports (all of them when any port matches none)."""
    src, dst = conn
    out: set[tuple[Element, str]] = {
        ((SuspectKind.RANK, str(src)), "tx"),
        ((SuspectKind.RANK, str(dst)), "rx"),
    }
    hosts = dict(rank_hosts)
    if routes is not None:
        hosts.update(routes.rank_hosts)
    if src in hosts:
        out.add(((SuspectKind.HOST, hosts[src]), "tx"))
    if dst in hosts:
        out.add(((SuspectKind.HOST, hosts[dst]), "rx"))
    flows = () if routes is None else routes.connections.get(conn, ())
    if sports:
        picked = tuple(f for f in flows if f.sport in sports)
        if {f.sport for f in picked} == set(sports):
            flows = picked
    for flow in flows:
        out.add(((SuspectKind.HOST, flow.src_host), "tx"))
        out.add(((SuspectKind.HOST, flow.dst_host), "rx"))
        out.add(((SuspectKind.NIC_PORT, flow.src_port), "tx"))
        out.add(((SuspectKind.NIC_PORT, flow.dst_port), "rx"))
        for link, direction in flow.directed_links():
            out.add(((SuspectKind.LINK, link), direction))
    return out


@dataclass(frozen=True, slots=True)
class Localization:
    """Suspects, most likely first; `tied`: how many candidates of the first one's kind explain
    the data exactly as well (1 = unambiguous; more = the data cannot tell them apart)."""

    suspects: tuple[Suspect, ...]
    tied: int
    explained: tuple[Connection, ...] = ()  # the bad connections the first suspect explains


def localize(
    bad: Iterable[Connection],
    good: Iterable[Connection],
    routes: JobRoutes | None,
    rank_hosts: Mapping[int, str],
    directed: bool = True,
    flows: Mapping[Connection, Set[int]] | None = None,
) -> Localization:
    """Suspects for the bad connections, most likely first (at most MAX_SUSPECTS).

    `directed=False` lets a healthy connection exonerate an element it crosses either way: for
    dead elements (hangs), since a dead port or cable stops both directions. `flows` narrows a
    bad connection to the planned flows of the given source ports (those that stalled)."""
    tallies: dict[Element, _Tally] = {}
    bad_set = sorted(set(bad))
    narrowed = {} if flows is None else flows
    for conn in bad_set:
        for element, direction in crossings(conn, routes, rank_hosts,
                                            narrowed.get(conn, frozenset())):
            tally = tallies.setdefault(element, _Tally())
            tally.bad.add(conn)
            tally.bad_dirs.add(direction)
    for conn in sorted(set(good) - set(bad_set)):
        for element, direction in crossings(conn, routes, rank_hosts):
            if element in tallies:
                tallies[element].good_by_dir.setdefault(direction, set()).add(conn)

    def rank_key(item: tuple[Element, _Tally]) -> tuple[int, int, int, int, str]:
        (kind, name), tally = item
        exonerated = tally.exonerations(directed)
        return (1 if exonerated else 0, -len(tally.bad), exonerated, _KIND_ORDER[kind], name)

    ranked = [element for element, _ in sorted(tallies.items(), key=rank_key)]
    if not ranked:
        return Localization((), 0)
    top = rank_key((ranked[0], tallies[ranked[0]]))[:3]
    tied = [e for e in ranked if rank_key((e, tallies[e]))[:3] == top and e[0] == ranked[0][0]]
    ranked = _host_before_its_tied_ports(ranked, tied)
    suspects = tuple(Suspect(kind, name) for kind, name in ranked[:MAX_SUSPECTS])
    explained = tuple(sorted(tallies[ranked[0]].bad))
    return Localization(suspects, len(tied) if ranked[0] in tied else 1, explained)


def _host_before_its_tied_ports(ranked: list[Element], tied: list[Element]) -> list[Element]:
    """Two ports of one host that explain the data equally (a dual-port NIC whose connections
    spread over both ports) point at the host: name it first, then the ports."""
    if len(tied) < 2 or tied[0][0] != SuspectKind.NIC_PORT:
        return ranked
    hosts = {name.split(":", 1)[0] for _, name in tied}
    host = (SuspectKind.HOST, hosts.pop())
    if hosts or host not in ranked:
        return ranked
    return [host] + [e for e in ranked if e != host]


def rank_suspects(
    ranks: Iterable[int], routes: JobRoutes | None, rank_hosts: Mapping[int, str]
) -> tuple[Suspect, ...]:
    """Hosts of the given ranks (in the given order, deduplicated), then the ranks themselves."""
    hosts = dict(rank_hosts)
    if routes is not None:
        hosts.update(routes.rank_hosts)
    ordered = list(ranks)
    out: list[Suspect] = []
    for rank in ordered:
        if rank in hosts and Suspect(SuspectKind.HOST, hosts[rank]) not in out:
            out.append(Suspect(SuspectKind.HOST, hosts[rank]))
    out.extend(Suspect(SuspectKind.RANK, str(rank)) for rank in ordered)
    return tuple(out[:MAX_SUSPECTS])
