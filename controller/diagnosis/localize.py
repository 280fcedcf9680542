"""Localisation: which element (link, NIC port, host, rank) explains a set of bad connections,
across every job whose planned flows cross it.

Every connection (job, src rank -> dst rank) crosses elements: the two hosts, the two NIC
ports and the links of its planned flows, each in a direction (tx/rx, or a link's "ab"/"ba").
Hosts, ports and links are the fabric's, shared by jobs; ranks are a job's own. An element is
a candidate when bad connections cross it; it is exonerated by healthy connections (of any
job) that cross it in a direction in which bad ones do. Candidates are ranked by: not
exonerated, most bad connections explained, then most of their flows, fewest healthy
crossings, fewest bystanders (below), then kind (NIC port
before host before link before rank: the more specific of two equal explanations that a person
can act on) and name. So a bad cell of the rate matrix (a link or a path) lands on the one link
the slow connections share and the healthy ones avoid, and a bad row or column lands on a NIC
port or a host; a degraded link that slows one connection in each of two jobs explains both,
where each job alone could not tell it from that connection's endpoints.

An item narrowed to some flows (their source ports) crosses only those flows' elements; a
healthy flow of a bad connection exonerates what it crosses, like a healthy connection. Without
routes (job not planned) only hosts and ranks are candidates. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
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
ALL_FLOWS = -1

# (job, src rank, dst rank): a connection of a job
Item = tuple[str, int, int]
# (job, src rank, dst rank, sport): one flow of it (ALL_FLOWS: every flow)
FlowItem = tuple[str, int, int, int]
Element = tuple[SuspectKind, str]  # ranks are named "job/rank" inside this module


@dataclass(frozen=True, slots=True)
class Scope:
    """What localisation knows of each job: its planned routes (None: not planned) and the
    hosts its ranks reported from."""

    routes: Mapping[str, JobRoutes | None]
    rank_hosts: Mapping[str, Mapping[int, str]]

    @staticmethod
    def one(job: str, routes: JobRoutes | None, rank_hosts: Mapping[int, str]) -> Scope:
        return Scope({job: routes}, {job: rank_hosts})

    def hosts(self, job: str) -> dict[int, str]:
        out = dict(self.rank_hosts.get(job, {}))
        routes = self.routes.get(job)
        if routes is not None:
            out.update(routes.rank_hosts)
        return out


@dataclass(slots=True)
class _Tally:
    bad: set[Item] = field(default_factory=set)
    bad_flows: set[tuple[Item, int]] = field(default_factory=set)
    bad_dirs: set[str] = field(default_factory=set)
    good_by_dir: dict[str, set[FlowItem]] = field(default_factory=dict)
    bystanders: set[FlowItem] = field(default_factory=set)

    def exonerations(self, directed: bool) -> int:
        cleared: set[FlowItem] = set()
        for direction, items in self.good_by_dir.items():
            same_way = direction in self.bad_dirs or "" in self.bad_dirs or direction == ""
            if same_way or not directed:
                cleared |= items
        return len(cleared)


def crossings(
    item: Item, scope: Scope, sports: Set[int] = frozenset(),
) -> set[tuple[Element, str]]:
    """The (element, direction) pairs a connection crosses; with `sports`, only through its
    planned flows of those source ports (all of them when any port matches none)."""
    out: set[tuple[Element, str]] = set()
    for _, crossed in flow_crossings(item, scope, sports):
        out |= crossed
    return out


def host_groups(item: Item, scope: Scope) -> dict[Element, str]:
    """The host each endpoint element of a connection's planned flows belongs to: its hosts,
    their NIC ports and the ports' access links (a flow's first and last link). No telemetry
    tells a port from its host or its cable, so they are one candidate, not a tie."""
    job, src, dst = item
    routes = scope.routes.get(job)
    out: dict[Element, str] = {}
    for flow in () if routes is None else routes.connections.get((src, dst), ()):
        for host, port, link in ((flow.src_host, flow.src_port, flow.links[:1]),
                                 (flow.dst_host, flow.dst_port, flow.links[-1:])):
            out[(SuspectKind.HOST, host)] = host
            out[(SuspectKind.NIC_PORT, port)] = host
            for name in link:
                out[(SuspectKind.LINK, name)] = host
    return out


def flow_crossings(
    item: Item, scope: Scope, sports: Set[int] = frozenset(),
) -> list[tuple[int, set[tuple[Element, str]]]]:
    """Per planned flow of the connection (by index; only those of `sports` when all of them
    are planned), the (element, direction) pairs it crosses, its ranks and hosts included.
    One pseudo-flow of ranks and hosts when the job has no planned route for it."""
    job, src, dst = item
    out: set[tuple[Element, str]] = {
        ((SuspectKind.RANK, f"{job}/{src}"), "tx"),
        ((SuspectKind.RANK, f"{job}/{dst}"), "rx"),
    }
    hosts = scope.hosts(job)
    if src in hosts:
        out.add(((SuspectKind.HOST, hosts[src]), "tx"))
    if dst in hosts:
        out.add(((SuspectKind.HOST, hosts[dst]), "rx"))
    routes = scope.routes.get(job)
    flows = () if routes is None else routes.connections.get((src, dst), ())
    picked = list(enumerate(flows))
    if sports:
        narrowed = [(i, f) for i, f in picked if f.sport in sports]
        if {f.sport for _, f in narrowed} == set(sports):
            picked = narrowed
    if not picked:
        return [(ALL_FLOWS, out)]
    result: list[tuple[int, set[tuple[Element, str]]]] = []
    for i, flow in picked:
        crossed = set(out)
        crossed.add(((SuspectKind.HOST, flow.src_host), "tx"))
        crossed.add(((SuspectKind.HOST, flow.dst_host), "rx"))
        crossed.add(((SuspectKind.NIC_PORT, flow.src_port), "tx"))
        crossed.add(((SuspectKind.NIC_PORT, flow.dst_port), "rx"))
        for link, direction in flow.directed_links():
            crossed.add(((SuspectKind.LINK, link), direction))
        result.append((i, crossed))
    return result


@dataclass(frozen=True, slots=True)
class Localization:
    """Elements, most likely first; `tied`: how many candidates of the first one's kind explain
    the data exactly as well (1 = unambiguous; more = the data cannot tell them apart)."""

    ranked: tuple[Element, ...]
    tied: int
    explained: tuple[Item, ...] = ()  # the bad items the first element explains
    jobs_of: Mapping[Element, frozenset[str]] = field(default_factory=dict)
    # candidates of any kind (ranks aside) that explain the data exactly as well as the first,
    # a host with its ports and their cables counted once
    ties_any: int = 1

    @property
    def suspects(self) -> tuple[Suspect, ...]:
        """Suspects over every job (ranks keep their "job/rank" names)."""
        return tuple(Suspect(k, n) for k, n in self.ranked[:MAX_SUSPECTS])

    def suspects_for(self, job: str) -> tuple[Suspect, ...]:
        """Suspects as one job's alarm names them: elements its bad connections cross, its
        ranks by number."""
        out: list[Suspect] = []
        for kind, name in self.ranked:
            if job not in self.jobs_of.get((kind, name), frozenset()):
                continue
            if kind == SuspectKind.RANK:
                if not name.startswith(f"{job}/"):
                    continue
                name = name[len(job) + 1:]
            out.append(Suspect(kind, name))
            if len(out) == MAX_SUSPECTS:
                break
        return tuple(out)

    def other_jobs(self, job: str) -> list[str]:
        """Jobs other than `job` whose bad connections the first element explains."""
        return sorted({j for j, _, _ in self.explained} - {job})


def localize(
    bad: Iterable[Item],
    good: Iterable[Item | FlowItem],
    scope: Scope,
    directed: bool = True,
    flows: Mapping[Item, Set[int]] | None = None,
    bystanders: Iterable[Item | FlowItem] = (),
    dead: bool = False,
    directed_links: bool = False,
    down: Set[str] | Mapping[str, str] = frozenset(),
) -> Localization:
    """Elements for the bad items, most likely first.

    `good` holds healthy connections (job, src, dst) or healthy flows (job, src, dst, sport).
    `directed=False` lets a healthy item exonerate an element it crosses either way: for
    dead elements (hangs), since a dead port or cable stops both directions. `flows` narrows
    a bad item to its planned flows of the given source ports (those that are bad).
    `bystanders`: items neither bad nor shown healthy (a flow not stuck, which may only have
    been idle); between candidates that explain the data equally, the one fewer of them
    cross is the more likely (a dead port stops every flow that uses it, a dead link only
    those that cross it).

    `dead=True` (hangs): where the best candidate is an endpoint (a host, its NIC port or its
    access link) and a fabric link explains the data exactly as well, the link comes first:
    the data cannot tell them apart, and naming the endpoint would isolate a host on a guess
    (a lone stuck connection names both of its hosts and every link of its path equally).
    Where the endpoint does not explain every stuck item, a fabric link that every flow
    crossing it is stuck on (no bystander, nothing exonerating it) comes first. A dead port stops every
    flow of its host, data and acknowledgements alike, so it explains all that is stuck when it
    is the cause; a dead fabric link also stops TCP flows whose acknowledgements (not planned,
    so not in any route) cross it, which then look stuck on paths the link is not on, and an
    endpoint can collect more of them than the link's own flows without explaining them all.

    `directed_links=True` (hangs seen through TCP): links are exonerated only by healthy items
    crossing them the way bad ones do, other elements either way. A link that goes down is
    seen at once by the switches at its ends, which move their own outgoing flows to other
    next hops, while the far side of the fabric keeps hashing flows into it until routing
    converges: a one-way black hole, which flows planned across it the other way (re-hashed
    and working) must not clear.

    `down` (hangs): links reported down (an operator set them down, or a switch reports an end
    not operationally up). Where stuck flows cross one, it comes first, however the other
    evidence ranks it: their own switch says it carries nothing, which no inference from
    flows can outweigh (TCP flows whose acknowledgements cross it look stuck on other paths,
    and on two leaves both halves of a spine path explain the same flows). Of several, the one
    explaining most stuck items first; healthy items crossing it do not clear it (the switch
    at the end that went down re-hashes its own flows elsewhere, so they work)."""
    tallies: dict[Element, _Tally] = {}
    jobs_of: dict[Element, set[str]] = {}
    groups: dict[Element, str] = {}
    bad_set = sorted(set(bad))
    narrowed = {} if flows is None else flows
    for item in bad_set:
        groups.update(host_groups(item, scope))
        for flow, crossed in flow_crossings(item, scope, narrowed.get(item, frozenset())):
            for element, direction in crossed:
                tally = tallies.setdefault(element, _Tally())
                tally.bad.add(item)
                tally.bad_flows.add((item, flow))
                tally.bad_dirs.add(direction)
                jobs_of.setdefault(element, set()).add(item[0])
    bad_keys = set(bad_set)
    for g in sorted(set(good), key=lambda x: (x[0], x[1], x[2], x[3] if len(x) > 3 else -1)):
        key: FlowItem = (g[0], g[1], g[2], g[3] if len(g) > 3 else ALL_FLOWS)
        conn: Item = (key[0], key[1], key[2])
        if key[3] == ALL_FLOWS and conn in bad_keys:
            continue
        sports = frozenset() if key[3] == ALL_FLOWS else frozenset({key[3]})
        for element, direction in crossings(conn, scope, sports):
            if element in tallies:
                tallies[element].good_by_dir.setdefault(direction, set()).add(key)
    for b in sorted(set(bystanders), key=lambda x: (x[0], x[1], x[2], x[3] if len(x) > 3 else -1)):
        bkey: FlowItem = (b[0], b[1], b[2], b[3] if len(b) > 3 else ALL_FLOWS)
        bsports = frozenset() if bkey[3] == ALL_FLOWS else frozenset({bkey[3]})
        for element, _ in crossings((bkey[0], bkey[1], bkey[2]), scope, bsports):
            if element in tallies:
                tallies[element].bystanders.add(bkey)

    def one_way(kind: SuspectKind) -> bool:
        return directed or (directed_links and kind == SuspectKind.LINK)

    def rank_key(item: tuple[Element, _Tally]) -> tuple[int, int, int, int, int, int, str]:
        (kind, name), tally = item
        exonerated = tally.exonerations(one_way(kind))
        # Ranks cross every flow of their connections but name nothing to repair: they come
        # after the fabric's elements that explain as many connections.
        flows = 0 if kind == SuspectKind.RANK else -len(tally.bad_flows)
        return (1 if exonerated else 0, -len(tally.bad), flows, exonerated,
                len(tally.bystanders), _KIND_ORDER[kind], name)

    ranked = [element for element, _ in sorted(tallies.items(), key=rank_key)]
    if not ranked:
        return Localization((), 0)
    top = rank_key((ranked[0], tallies[ranked[0]]))[:5]
    tied = [e for e in ranked if rank_key((e, tallies[e]))[:5] == top and e[0] == ranked[0][0]]
    ties_any = len({groups.get(e, f"{e[0]}/{e[1]}") for e in ranked
                    if rank_key((e, tallies[e]))[:5] == top and e[0] != SuspectKind.RANK})
    ranked = _host_before_its_tied_ports(ranked, tied)
    if dead:
        fabric = _fabric_first(ranked, tallies, groups, len(bad_set), one_way(SuspectKind.LINK),
                               rank_key)
        if fabric:
            ranked = fabric[:1] + [e for e in ranked if e != fabric[0]]
            tied = fabric
        reported = _reported_down(ranked, tallies, down)
        if reported:
            ranked = reported + [e for e in ranked if e not in reported]
            tied = reported
    explained = tuple(sorted(tallies[ranked[0]].bad))
    return Localization(tuple(ranked), len(tied) if ranked[0] in tied else 1, explained,
                        {e: frozenset(j) for e, j in jobs_of.items()}, max(1, ties_any))


def _fabric_first(ranked: list[Element], tallies: Mapping[Element, _Tally],
                  groups: Mapping[Element, str], nbad: int, directed: bool,
                  key: Callable[[tuple[Element, _Tally]], tuple[int, int, int, int, int, int, str]],
                  ) -> list[Element]:
    """Fabric links to name before an endpoint (`localize`'s `dead`), the best first and only
    those equal to it; [] to keep the order. Either a fabric link explains the data exactly
    as well as the endpoint (the evidence cannot tell them apart: naming the endpoint would
    isolate a host on a guess), or the endpoint explains only part of what is stuck while a
    fabric link has every flow that crosses it stuck."""
    first = ranked[0]
    endpoint = first[0] in (SuspectKind.HOST, SuspectKind.NIC_PORT) or first in groups
    if not endpoint:
        return []

    def fabric(e: Element) -> bool:
        return e[0] == SuspectKind.LINK and e not in groups

    top = key((first, tallies[first]))[:5]
    equal = [e for e in ranked if fabric(e) and key((e, tallies[e]))[:5] == top]
    if equal:
        return equal
    if len(tallies[first].bad) >= nbad:
        return []
    consistent = [e for e in ranked if fabric(e) and not tallies[e].bystanders
                  and not tallies[e].exonerations(directed)]
    if not consistent:
        return []

    def strength(e: Element) -> tuple[int, int]:
        return (len(tallies[e].bad), len(tallies[e].bad_flows))

    return [e for e in consistent if strength(e) == strength(consistent[0])]


def _reported_down(ranked: list[Element], tallies: Mapping[Element, _Tally],
                   down: Set[str] | Mapping[str, str]) -> list[Element]:
    """The links reported down that stuck flows cross, those explaining the most first (in
    `ranked` order among equals), only those equal to the best; [] when none."""
    links = [e for e in ranked if e[0] == SuspectKind.LINK and e[1] in down]
    if not links:
        return []

    def strength(e: Element) -> tuple[int, int]:
        return (len(tallies[e].bad), len(tallies[e].bad_flows))

    best = max(strength(e) for e in links)
    return [e for e in links if strength(e) == best]


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


def job_items(job: str, conns: Iterable[Connection]) -> list[Item]:
    return [(job, s, d) for s, d in conns]
