"""Probed mode, pure part: hop addresses become paths; a probe book gives ports only for fresh
entries; the planner then plans only on probed ports and the validator checks against them."""

from __future__ import annotations

from controller.domain.fabric import ROCE_SPORT_MIN, Hashing, HashingMode
from controller.te import planner
from controller.te.candidates import Candidates
from controller.te.probes import ProbeBook, ProbeEntry, hops_to_path
from controller.te.validate import plan_problems
from controller.topology.generate import LeafSpineSpec, leaf_spine
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path

from .conftest import FAST, flows_of, ring

FABRIC = leaf_spine(LeafSpineSpec(leaves=2, spines=2, hosts_per_leaf=2))
NOW_US = 1_764_430_000_000_000


def entries(view: FabricView, t_us: int) -> list[ProbeEntry]:
    out = []
    for s in view.ports.values():
        for d in view.ports.values():
            if s.host == d.host:
                continue
            for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + 32):
                path = ref_v1_path(view, s.node, d.node, sport)
                assert path is not None
                out.append(ProbeEntry(s.address, d.address, sport, path, t_us))
    return out


def test_hops_map_to_the_path_and_unknown_hops_do_not() -> None:
    view = FabricView(FABRIC)
    path = ref_v1_path(view, "host0:mlx5_0:p0", "host2:mlx5_0:p0", 50000)
    assert path is not None
    hops = [view.switches[s].mgmt_address or "" for s in path[1:-1]] + [view.ports["host2:mlx5_0:p0"].address]
    src, dst = view.ports["host0:mlx5_0:p0"].address, view.ports["host2:mlx5_0:p0"].address
    assert hops_to_path(view, src, dst, hops) == path
    assert hops_to_path(view, src, dst, ["192.0.2.99"]) is None
    # a live connection's 5-tuple: the destination does not answer the SYN in a way the prober
    # matches; the hops up to its switch still name the whole path
    assert hops_to_path(view, src, dst, [*hops[:-1], "*", "*"]) == path
    # a gap before a switch that answered: unknown
    assert hops_to_path(view, src, dst, [hops[0], "*", *hops[2:]]) is None
    # the destination's switch never answered: unknown
    assert hops_to_path(view, src, dst, [*hops[:-2], "*", "*"]) is None


def test_planning_on_probed_ports_only_and_stale_entries_expire() -> None:
    from dataclasses import replace

    fabric = replace(FABRIC, hashing=Hashing(mode=HashingMode.PROBED))
    view = FabricView(fabric)
    book = ProbeBook(view, entries(view, NOW_US - 1_000_000), NOW_US, ttl_s=60)
    flows = flows_of(ring("j", fabric, [h.name for h in fabric.hosts], 1, 2, 0), fabric)
    p = planner.plan(fabric, {"j": flows}, {}, FAST, Candidates(view, book))["j"]
    assert p.summary is not None
    assert plan_problems(view, flows, p.assignments, book.seen()) == []
    stale = ProbeBook(view, entries(view, NOW_US - 120_000_000), NOW_US, ttl_s=60)
    assert stale.missing_pairs([("host0:mlx5_0:p0", "host2:mlx5_0:p0")]) == [("10.0.0.2", "10.0.0.10")]
    failed = planner.plan(fabric, {"j": flows}, {}, FAST, Candidates(view, stale))["j"]
    assert failed.summary is None and failed.error is not None


def test_distinct_sports_gives_flows_of_one_path_their_own_probed_ports() -> None:
    """The TCP transport has a socket per flow: two flows of one path planned on the same
    (lowest) probed port would be one 5-tuple. `distinct_sports` spreads them over the path's
    probed ports, keeps a flow's current port when it can, and leaves lone flows alone."""
    from controller.domain.jobs import Assignment, FlowKey
    from controller.te.probes import distinct_sports

    p, q = ("a", "leaf0", "spine0", "leaf1", "b"), ("a", "leaf0", "spine1", "leaf1", "b")
    k = [FlowKey(0, 1, c, 0) for c in range(4)]
    asg = {k[0]: Assignment(k[0], "a", "b", 49153, 0.5, p, ()), k[1]: Assignment(k[1], "a", "b", 49153, 0.5, p, ()),
           k[2]: Assignment(k[2], "a", "b", 49153, 0.5, p, ()), k[3]: Assignment(k[3], "a", "b", 49152, 0.5, q, ())}
    seen = {("a", "b", p): {49153, 49154, 49157}, ("a", "b", q): {49152}}
    out = distinct_sports(asg, seen)
    assert [out[x].udp_sport for x in k] == [49153, 49154, 49157, 49152]
    assert all(out[x].path == asg[x].path for x in k)
    # a re-plan keeps the ports flows already have (no churn of live sockets)
    current = {k[0]: out[k[0]],
               k[1]: Assignment(k[1], "a", "b", 49157, 0.5, p, ())}
    again = distinct_sports(asg, seen, current)
    assert again[k[1]].udp_sport == 49157 and again[k[0]].udp_sport == 49153 and again[k[2]].udp_sport == 49154
    # more flows than probed ports: the rest keep the lowest (nothing better is known)
    few = distinct_sports(asg, {("a", "b", p): {49153, 49154}})
    assert sorted(few[x].udp_sport for x in k[:3]) == [49153, 49153, 49154]
