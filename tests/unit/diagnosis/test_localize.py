"""The rate matrix localiser on hand-built routes: a bad cell is a link, a bad row a NIC port."""

from __future__ import annotations

from dataclasses import replace

from controller.diagnosis.hangs import stalled_sports
from controller.diagnosis.localize import localize
from controller.diagnosis.routes import JobRoutes, PlannedFlow
from controller.diagnosis.simfabric import SPORT_BASE, fabric_link, flow, port_name
from controller.domain.alarms import Suspect, SuspectKind
from controller.domain.telemetry import FlowProgress, PeerProgress

# Four leaves of two hosts, two spines; every rank talks to every rank on another leaf.
N, HPL, SPINES, SEED = 8, 2, 2, 3
ALL = sorted((s, d) for s in range(N) for d in range(N) if s // HPL != d // HPL)
TABLE = JobRoutes("job", {r: f"host{r}" for r in range(N)},
                  {(s, d): (flow(s, d, 0, HPL, SPINES, SEED),) for s, d in ALL})


def _crossing(link: str, direction: str) -> list[tuple[int, int]]:
    return [c for c in ALL
            if any((lk, dr) == (link, direction) for f in TABLE.connections[c]
                   for lk, dr in f.directed_links())]


def test_bad_cell_lands_on_the_shared_link() -> None:
    link = fabric_link(1, 0)
    bad = _crossing(link, "ab")
    assert len(bad) >= 2
    found = localize(bad, [c for c in ALL if c not in bad], TABLE, {})
    assert found.suspects[0] == Suspect(SuspectKind.LINK, link)


def test_bad_row_and_column_land_on_the_nic_port() -> None:
    bad = [c for c in ALL if 5 in c]
    found = localize(bad, [c for c in ALL if c not in bad], TABLE, {})
    assert found.suspects[0] == Suspect(SuspectKind.NIC_PORT, port_name(5))
    assert Suspect(SuspectKind.HOST, "host5") in found.suspects


def test_without_routes_a_bad_row_lands_on_the_host() -> None:
    bad = [c for c in ALL if c[0] == 2]
    hosts = {r: f"host{r}" for r in range(N)}
    found = localize(bad, [c for c in ALL if c not in bad], None, hosts)
    assert found.suspects[:2] == (Suspect(SuspectKind.HOST, "host2"), Suspect(SuspectKind.RANK, "2"))


def test_link_direction_is_respected() -> None:
    flow = PlannedFlow("h0", "h0:n:p0", "h1", "h1:n:p0", ("h0:n:p0", "leaf0", "spine0"),
                       ("h0:n:p0--leaf0:Ethernet1", "leaf0:Ethernet0--spine0:Ethernet0"))
    back = PlannedFlow("h1", "h1:n:p0", "h0", "h0:n:p0", ("spine0", "leaf0", "h0:n:p0"),
                       ("leaf0:Ethernet0--spine0:Ethernet0", "h0:n:p0--leaf0:Ethernet1"))
    assert [d for _, d in flow.directed_links()] == ["ab", "ab"]
    assert [d for _, d in back.directed_links()] == ["ba", "ba"]


def test_slow_transmit_only_row_still_names_the_port_not_its_receivers() -> None:
    bad = [c for c in ALL if c[0] == 5]
    found = localize(bad, [c for c in ALL if c not in bad], TABLE, {})
    assert found.suspects[0] == Suspect(SuspectKind.NIC_PORT, port_name(5))
    assert found.tied == 1


def test_healthy_traffic_the_other_way_does_not_exonerate_a_link() -> None:
    link = fabric_link(1, 0)
    bad = _crossing(link, "ab")
    reverse = _crossing(link, "ba")
    assert reverse and not set(reverse) & set(bad)
    found = localize(bad, [c for c in ALL if c not in bad], TABLE, {})
    assert found.suspects[0] == Suspect(SuspectKind.LINK, link)
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
    found = localize(bad, [c for c in conns if c not in bad], routes, {})
    assert found.suspects[0] == Suspect(SuspectKind.HOST, "host2")
    assert set(found.suspects[1:3]) == {Suspect(SuspectKind.NIC_PORT, "host2:mlx5_0:p0"),
                                        Suspect(SuspectKind.NIC_PORT, "host2:mlx5_0:p1")}


# Two flows per connection (channels 0 and 1, source ports SPORT_BASE + channel, distinct spines).
TWO = JobRoutes("job", {r: f"host{r}" for r in range(N)},
                {(s, d): tuple(flow(s, d, ch, HPL, SPINES, SEED) for ch in range(2)) for s, d in ALL})


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
    bad = [(0, 4)]
    good = [c for c in ALL if c not in bad]
    stalled = TWO.connections[(0, 4)][1]
    found = localize(bad, good, TWO, {}, directed=False, flows={(0, 4): {stalled.sport or 0}})
    links = {s.name for s in found.suspects if s.kind == SuspectKind.LINK}
    assert links and links <= set(stalled.links)
    everything = localize(bad, good, TWO, {}, directed=False)
    unknown = localize(bad, good, TWO, {}, directed=False, flows={(0, 4): {12345}})
    assert unknown == everything  # a port no planned flow has: every flow, as without data
