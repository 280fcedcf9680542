"""The rate matrix localiser on hand-built routes: a bad cell is a link, a bad row a NIC port,
a link that slows two jobs is named where each job alone names an endpoint, and link
directions come from the fabric's endpoints, not from link names."""

from __future__ import annotations

from dataclasses import replace

from controller.diagnosis.hangs import stalled_sports
from controller.diagnosis.localize import Scope, localize
from controller.diagnosis.routes import JobRoutes, PlannedFlow, link_directions
from controller.diagnosis.simfabric import SPORT_BASE, SimFabric, fabric_link, port_name
from controller.domain.alarms import Suspect, SuspectKind
from controller.domain.telemetry import FlowProgress, PeerProgress

# Four leaves of two hosts, two spines; every rank talks to every rank on another leaf.
N, HPL, SPINES, SEED = 8, 2, 2, 3
FABRIC = SimFabric(HPL, SPINES, SEED, tuple(range(N)))
ALL = sorted((s, d) for s in range(N) for d in range(N) if s // HPL != d // HPL)
TABLE = FABRIC.routes("job", ALL, 1)
SCOPE = Scope.one("job", TABLE, {})


def _items(conns: list[tuple[int, int]], job: str = "job") -> list[tuple[str, int, int]]:
    return [(job, s, d) for s, d in conns]


def _crossing(table: JobRoutes, link: str, direction: str) -> list[tuple[int, int]]:
    return [c for c in sorted(table.connections)
            if any((lk, dr) == (link, direction) for f in table.connections[c]
                   for lk, dr in f.directed_links())]


def test_bad_cell_lands_on_the_shared_link() -> None:
    link = fabric_link(1, 0)
    bad = _crossing(TABLE, link, "ab")
    assert len(bad) >= 2
    found = localize(_items(bad), _items([c for c in ALL if c not in bad]), SCOPE)
    assert found.suspects_for("job")[0] == Suspect(SuspectKind.LINK, link)


def test_bad_row_and_column_land_on_the_nic_port() -> None:
    bad = [c for c in ALL if 5 in c]
    found = localize(_items(bad), _items([c for c in ALL if c not in bad]), SCOPE)
    suspects = found.suspects_for("job")
    assert suspects[0] == Suspect(SuspectKind.NIC_PORT, port_name(5))
    assert Suspect(SuspectKind.HOST, "host5") in suspects


def test_without_routes_a_bad_row_lands_on_the_host() -> None:
    bad = [c for c in ALL if c[0] == 2]
    scope = Scope.one("job", None, {r: f"host{r}" for r in range(N)})
    found = localize(_items(bad), _items([c for c in ALL if c not in bad]), scope)
    assert found.suspects_for("job")[:2] == (Suspect(SuspectKind.HOST, "host2"),
                                            Suspect(SuspectKind.RANK, "2"))


def test_link_directions_come_from_the_fabric_endpoints_even_with_custom_names() -> None:
    path = ("h0:n:p0", "leaf0", "spine0")
    links = ("access-7", "uplink-3")  # names that say nothing about their ends
    ends = {"access-7": ("h0:n:p0", "leaf0"), "uplink-3": ("spine0", "leaf0")}
    assert link_directions(path, links, ends) == ("ab", "ba")
    assert link_directions(tuple(reversed(path)), tuple(reversed(links)), ends) == ("ab", "ba")
    assert link_directions(path, links, {}) == ("", "")  # unknown ends: both directions
    flow = PlannedFlow("h0", "h0:n:p0", "h1", "h1:n:p0", path, links,
                       directions=link_directions(path, links, ends))
    assert flow.directed_links() == (("access-7", "ab"), ("uplink-3", "ba"))
    assert replace(flow, directions=()).directed_links() == (("access-7", ""), ("uplink-3", ""))


def test_custom_link_names_keep_a_slow_direction_apart_from_the_healthy_reverse() -> None:
    """The same fabric with every link renamed: directions from endpoints still let healthy
    traffic the other way leave the slow link alone."""
    rename = {lk: f"cable-{i}" for i, lk in enumerate(sorted(
        {lk for fl in TABLE.connections.values() for f in fl for lk in f.links}))}
    table = JobRoutes("job", TABLE.rank_hosts, {
        c: tuple(replace(f, links=tuple(rename[lk] for lk in f.links)) for f in fl)
        for c, fl in TABLE.connections.items()})
    link = rename[fabric_link(1, 0)]
    bad = _crossing(table, link, "ab")
    assert bad and _crossing(table, link, "ba")
    found = localize(_items(bad), _items([c for c in ALL if c not in bad]),
                     Scope.one("job", table, {}))
    assert found.suspects_for("job")[0] == Suspect(SuspectKind.LINK, link) and found.tied == 1


def test_slow_transmit_only_row_still_names_the_port_not_its_receivers() -> None:
    bad = [c for c in ALL if c[0] == 5]
    found = localize(_items(bad), _items([c for c in ALL if c not in bad]), SCOPE)
    assert found.suspects_for("job")[0] == Suspect(SuspectKind.NIC_PORT, port_name(5))
    assert found.tied == 1


def test_healthy_traffic_the_other_way_does_not_exonerate_a_link() -> None:
    link = fabric_link(1, 0)
    bad = _crossing(TABLE, link, "ab")
    reverse = _crossing(TABLE, link, "ba")
    assert reverse and not set(reverse) & set(bad)
    found = localize(_items(bad), _items([c for c in ALL if c not in bad]), SCOPE)
    assert found.suspects_for("job")[0] == Suspect(SuspectKind.LINK, link)
    assert found.tied == 1


def test_both_ports_of_a_dual_port_nic_tied_name_the_host_first() -> None:
    def dual(s: int, d: int) -> tuple[PlannedFlow, ...]:
        return tuple(
            PlannedFlow(f"host{s}", f"host{s}:mlx5_0:p{p}", f"host{d}", f"host{d}:mlx5_0:p{p}",
                        (), (f"host{s}:mlx5_0:p{p}--leaf{p}:Ethernet{s}",
                             f"host{d}:mlx5_0:p{p}--leaf{p}:Ethernet{d}"))
            for p in (0, 1))

    conns = [(s, d) for s in range(4) for d in range(4) if s != d]
    routes = JobRoutes("job", {r: f"host{r}" for r in range(4)}, {c: dual(*c) for c in conns})
    bad = [c for c in conns if 2 in c]
    found = localize(_items(bad), _items([c for c in conns if c not in bad]),
                     Scope.one("job", routes, {}))
    suspects = found.suspects_for("job")
    assert suspects[0] == Suspect(SuspectKind.HOST, "host2")
    assert set(suspects[1:3]) == {Suspect(SuspectKind.NIC_PORT, "host2:mlx5_0:p0"),
                                  Suspect(SuspectKind.NIC_PORT, "host2:mlx5_0:p1")}


def test_a_link_slowing_one_connection_of_each_of_two_jobs_is_named_first_for_both() -> None:
    """Each job alone has one slow connection: its endpoints explain it as well as the link
    (and a NIC port is named first). Together, only the link explains both."""
    shared = None
    ring = [(0, 1), (1, 2), (2, 3), (3, 0)]
    for seed in range(20):  # the first fabric whose hashing gives such a link
        job_a = SimFabric(4, 2, seed, (0, 4, 8, 12))  # leaves 0 -> 1 -> 2 -> 3 -> 0
        job_b = SimFabric(4, 2, seed, (1, 9, 5, 13))  # leaves 0 -> 2 -> 1 -> 3 -> 0
        routes = {"a": job_a.routes("a", ring, 1), "b": job_b.routes("b", ring, 1)}
        for link in sorted({lk for r in routes.values() for fl in r.connections.values()
                            for f in fl for lk in f.links if lk.startswith("leaf")}):
            hits = {j: _crossing(r, link, "ab") for j, r in routes.items()}
            if not all(len(h) == 1 for h in hits.values()):
                continue
            paths = [set(routes[j].connections[hits[j][0]][0].directed_links()) for j in hits]
            if {lk for lk, _ in paths[0] & paths[1]} == {link}:  # the only element both cross
                shared = (link, hits)
                break
        if shared:
            break
    link, hits = shared
    bad = [(j, *hits[j][0]) for j in ("a", "b")]
    good = [(j, s, d) for j in ("a", "b") for s, d in ring if (j, s, d) not in bad]
    hosts = {j: r.rank_hosts for j, r in routes.items()}
    alone = localize([bad[0]], [g for g in good if g[0] == "a"],
                     Scope({"a": routes["a"]}, {"a": hosts["a"]}))
    assert alone.suspects_for("a")[0].kind == SuspectKind.NIC_PORT  # one job cannot tell
    together = localize(bad, good, Scope(routes, hosts))
    for job in ("a", "b"):
        assert together.suspects_for(job)[0] == Suspect(SuspectKind.LINK, link)
    assert together.other_jobs("a") == ["b"] and together.tied == 1


# Two flows per connection (source ports SPORT_BASE + flow index, distinct spines).
TWO = FABRIC.routes("job", ALL, 2)


def test_a_healthy_sibling_flow_clears_the_endpoints_of_a_slow_flow() -> None:
    """One slow connection whose second flow is healthy (and nothing else known): narrowed to
    the slow flow, and the healthy flow clearing the ports, hosts and access links they share,
    only the slow flow's two fabric links remain."""
    slow = TWO.connections[(0, 4)][1]
    bad = [("job", 0, 4)]
    sibling = [("job", 0, 4, SPORT_BASE)]
    found = localize(bad, sibling, Scope.one("job", TWO, {}), flows={bad[0]: {SPORT_BASE + 1}})
    assert {s.name for s in found.suspects_for("job")[:2]} == set(slow.links[1:3])
    assert found.tied == 2
    blind = localize(bad, [], Scope.one("job", TWO, {}), flows={bad[0]: {SPORT_BASE + 1}})
    assert blind.suspects_for("job")[0].kind == SuspectKind.NIC_PORT


def test_stalled_flows_are_those_holding_bytes_sent_but_not_received() -> None:
    send = PeerProgress(4, "send", 160, 1, 9, False, (FlowProgress(SPORT_BASE, 100, 5),
                                                      FlowProgress(SPORT_BASE + 1, 60, 9)))
    recv = PeerProgress(0, "recv", 140, 1, 9, False, (FlowProgress(SPORT_BASE, 100, 5),
                                                      FlowProgress(SPORT_BASE + 1, 40, 3)))
    assert stalled_sports(send, recv) == {SPORT_BASE + 1}
    assert stalled_sports(send, replace(recv, flows=())) == frozenset()  # one end cannot tell
    other = replace(recv, flows=(FlowProgress(SPORT_BASE, 100), FlowProgress(7, 40)))
    assert stalled_sports(send, other) == frozenset()  # not the same flows


def test_a_stuck_connection_narrowed_to_its_stalled_flow_crosses_only_that_flows_links() -> None:
    bad = [("job", 0, 4)]
    good = _items([c for c in ALL if c != (0, 4)])
    stalled = TWO.connections[(0, 4)][1]
    scope = Scope.one("job", TWO, {})
    found = localize(bad, good, scope, directed=False, flows={bad[0]: {stalled.sport or 0}})
    links = {s.name for s in found.suspects_for("job") if s.kind == SuspectKind.LINK}
    assert links and links <= set(stalled.links)
    everything = localize(bad, good, scope, directed=False)
    unknown = localize(bad, good, scope, directed=False, flows={bad[0]: {12345}})
    assert unknown == everything  # a port no planned flow has: every flow, as without data


def test_a_port_its_host_and_its_cable_are_one_candidate_but_one_slow_connection_is_ambiguous() -> None:
    """No telemetry tells a single-port NIC from its host or its access cable: a bad row is
    not ambiguous. One bad connection is: its two ends and its fabric links explain it alike."""
    row = [c for c in ALL if c[0] == 5]
    found = localize(_items(row), _items([c for c in ALL if c not in row]), SCOPE)
    assert found.ties_any == 1
    one = [ALL[0]]
    found = localize(_items(one), [], SCOPE)
    assert found.ties_any >= 3


def test_a_link_reported_down_comes_before_an_endpoint_that_explains_more() -> None:
    """A dead link also stalls TCP flows whose acknowledgements cross it (not planned, so on
    paths it is not on): rank 0's port is then an endpoint of everything stuck and explains
    more than the link does. A switch reporting the link down outweighs that; without the
    report the endpoint comes first."""
    first = (0, 4)
    link = TABLE.connections[first][0].links[1]
    other = next(c for c in ALL if c[0] == 0 and c != first
                 and all(link not in f.links for f in TABLE.connections[c]))
    bad = _items([first, other])
    good = _items([c for c in ALL if c not in (first, other) and 0 not in c])
    plain = localize(bad, good, SCOPE, directed=False, dead=True)
    assert plain.suspects_for("job")[0] == Suspect(SuspectKind.NIC_PORT, port_name(0))
    found = localize(bad, good, SCOPE, directed=False, dead=True, down={link: "leaf0:Ethernet1 ifOperStatus down"})
    assert found.suspects_for("job")[0] == Suspect(SuspectKind.LINK, link)
    assert found.tied == 1
    # only for hangs (`dead`): a slow detector's ranking is the evidence's alone
    assert localize(bad, good, SCOPE, directed=False, down={link: "x"}).ranked == \
        localize(bad, good, SCOPE, directed=False).ranked
