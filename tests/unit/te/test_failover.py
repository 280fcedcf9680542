"""Link-change recovery for live TCP connections, pure part (`te.failover`): which pairs a
link change re-hashes, and the re-weighting that keeps each flow's live source port, takes its
path from fresh probes and moves weight inside each connection to balance the links."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.domain.fabric import Hashing, HashingMode, LinkState
from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.te.failover import reweight, stale_pairs
from controller.te.instance import count_by_nic, demands_gbps, directed_capacity_gbps
from controller.te.probes import ProbeBook, ProbeEntry
from controller.te.validate import plan_problems
from controller.topology.build import with_link_state
from controller.topology.generate import LeafSpineSpec, leaf_spine
from controller.topology.graph import FabricView

from .conftest import flows_of, ring

NOW_US = 1_764_430_000_000_000
BASE = 49152
FABRIC = replace(leaf_spine(LeafSpineSpec(leaves=2, spines=3, hosts_per_leaf=2, ports_per_nic=1, host_gbps=100.0,
                                          fabric_gbps=100.0)),
                 hashing=Hashing(mode=HashingMode.PROBED, protocol="tcp", dst_port=4792))


def node(view: FabricView, host: str) -> str:
    return next(p.node for p in view.ports.values() if p.host == host)


def uplink(view: FabricView, leaf: str, spine: str) -> str:
    return view.link_between(leaf, spine).name


def test_stale_pairs_are_those_with_an_equal_cost_path_over_the_link() -> None:
    view = FabricView(FABRIC)
    h0, h1, h2 = node(view, "host0"), node(view, "host1"), node(view, "host2")
    link = uplink(view, "leaf0", "spine0")
    # host0 -> host2 crosses the spines (one of its paths uses the link); host0 -> host1 stays on leaf0
    assert stale_pairs(view, link, [(h0, h2), (h2, h0), (h0, h1)]) == {(h0, h2), (h2, h0)}
    # a link of another leaf's spine uplink also re-hashes pairs into that leaf
    assert stale_pairs(view, uplink(view, "leaf1", "spine2"), [(h0, h2), (h0, h1)]) == {(h0, h2)}


def _setup() -> tuple[FabricView, list[Flow], dict, ProbeBook, str]:
    """A ring (2 channels x 2 QPs) after leaf0--spine0 went down; every flow's live port and the
    fresh probes put channel 0's flows and channel 1's QP 0 on the lower surviving spine."""
    link = uplink(FabricView(FABRIC), "leaf0", "spine0")
    down = with_link_state(FABRIC, link, LinkState.DOWN)
    view = FabricView(down)
    flows = flows_of(ring("j", down, ["host0", "host1", "host2", "host3"], channels=2, qps=2, seed=3), down)
    asg = {}
    entries = []
    for f in flows:
        s, d = node(view, f.src_host), node(view, f.dst_host)
        paths = view.equal_cost_paths(s, d)
        port = BASE + 2 * f.key.channel + f.key.qp
        path = paths[0] if len(paths) == 1 or (f.key.channel, f.key.qp) != (1, 1) else paths[1]
        asg[f.key] = Assignment(f.key, s, d, port, 0.25, path, view.links_of(path))
        for p in range(BASE, BASE + 8):
            q = paths[0] if len(paths) == 1 or p - BASE < 3 else paths[(p - BASE) % len(paths)]
            entries.append(ProbeEntry(view.ports[s].address, view.ports[d].address, p, q, NOW_US))
    return view, flows, asg, ProbeBook(view, entries, NOW_US), link


def _max_util(view: FabricView, flows: list[Flow], asg: dict, demand: dict) -> float:
    load: dict = {}
    by_conn: dict = {}
    for f in flows:
        by_conn.setdefault((f.key.src_rank, f.key.dst_rank, f.key.channel), []).append(f)
    for keys in by_conn.values():
        dem = sum(demand[f.src] for f in keys)
        total = sum(asg[f.key].weight for f in keys)
        for f in keys:
            for d in view.directed_links_of(asg[f.key].path):
                load[d] = load.get(d, 0.0) + dem * asg[f.key].weight / total
    caps = directed_capacity_gbps(view.fabric)
    return max(v / caps[d] for d, v in load.items())


def test_reweight_keeps_live_ports_takes_probed_paths_and_balances_the_uplinks() -> None:
    view, flows, asg, book, _ = _setup()
    demand = demands_gbps(view.fabric, count_by_nic(flows))
    caps = directed_capacity_gbps(view.fabric)
    before = _max_util(view, flows, asg, demand)
    assert before > 1.2  # equal weights: three of each leaf's four connections' halves on one spine
    # the stored plan (a re-plan) gave some flows other ports; the live sockets keep theirs
    replanned = {k: (replace(a, udp_sport=BASE + 7) if k.channel == 0 and k.qp == 1 else a) for k, a in asg.items()}
    live = {k: a.udp_sport for k, a in asg.items()}
    res = reweight(view, flows, replanned, live, book, demand, {}, caps)
    assert res.unknown == ()
    assert all(res.assignments[k].udp_sport == live[k] for k in live)
    assert all(res.assignments[k].path == book.path_of(a.src_node, a.dst_node, live[k]) for k, a in asg.items())
    assert abs(res.max_utilization - 1.0) < 1e-5
    assert abs(_max_util(view, flows, res.assignments, demand) - res.max_utilization) < 1e-6
    # each connection's weights still sum to 1, each channel's to its share
    for f in flows:
        ch = [g for g in flows if (g.key.src_rank, g.key.dst_rank, g.key.channel) ==
              (f.key.src_rank, f.key.dst_rank, f.key.channel)]
        assert abs(sum(res.assignments[g.key].weight for g in ch) - 0.5) < 1e-9
    # the crossing channel-1 flow on the crowded spine gave its weight to its sibling
    crossing = [f for f in flows if len(view.equal_cost_paths(*(asg[f.key].src_node, asg[f.key].dst_node))) > 1]
    assert any(res.assignments[f.key].weight < 0.01 for f in crossing if f.key.channel == 1)
    assert plan_problems(view, flows, res.assignments, book.seen()) == []


def test_reweight_changes_nothing_while_a_live_port_has_no_fresh_path() -> None:
    view, flows, asg, book, _ = _setup()
    demand = demands_gbps(view.fabric, count_by_nic(flows))
    live = {k: a.udp_sport for k, a in asg.items()}
    first = next(k for k, a in asg.items() if len(view.equal_cost_paths(a.src_node, a.dst_node)) > 1)
    live[first] = BASE + 40  # never probed
    res = reweight(view, flows, asg, live, book, demand, {}, directed_capacity_gbps(view.fabric))
    assert res.unknown == (first,) and res.assignments == asg and res.changed == 0


def test_spread_connections_puts_each_channels_flows_on_different_paths_with_the_same_link_loads() -> None:
    """A plan with every connection's flows on one spine is as good for utilization as one
    with them spread, but leaves nothing for weights to shift; `spread_connections` exchanges
    path middles between flows of one leaf pair and equal demand: every link keeps its load."""
    from controller.te.probes import distinct_sports, spread_connections

    view = FabricView(FABRIC)
    flows = flows_of(ring("j", FABRIC, ["host0", "host2", "host1", "host3"], channels=2, qps=2, seed=2), FABRIC)
    demand = demands_gbps(FABRIC, count_by_nic(flows))
    seen: dict = {}
    asg = {}
    conns = sorted({(f.key.src_rank, f.key.dst_rank) for f in flows})
    for f in flows:
        s, d = node(view, f.src_host), node(view, f.dst_host)
        paths = view.equal_cost_paths(s, d)
        for i, p in enumerate(paths):
            seen[(s, d, p)] = {BASE + 10 * i, BASE + 10 * i + 1, BASE + 10 * i + 2, BASE + 10 * i + 3}
        # the plan: connection n entirely on spine n % 3 (all its channels' QPs on one path)
        p = paths[conns.index((f.key.src_rank, f.key.dst_rank)) % len(paths)]
        asg[f.key] = Assignment(f.key, s, d, min(seen[(s, d, p)]), 0.25, p, view.links_of(p))
    flow_demand = {f.key: demand[f.src] for f in flows}
    out = distinct_sports(spread_connections(view, asg, seen, flow_demand), seen)
    # every link direction carries what it carried
    assert _max_util(view, flows, out, demand) == _max_util(view, flows, asg, demand)

    def loads(a: dict) -> dict:
        acc: dict = {}
        for k, x in a.items():
            for d in view.directed_links_of(x.path):
                acc[d] = acc.get(d, 0.0) + flow_demand[k]
        return acc

    assert loads(out) == pytest.approx(loads(asg))
    # every crossing channel now has its two QPs on two different spines
    for f in flows:
        if f.key.qp == 0 and len(view.equal_cost_paths(asg[f.key].src_node, asg[f.key].dst_node)) > 1:
            sib = FlowKey(f.key.src_rank, f.key.dst_rank, f.key.channel, 1)
            assert out[f.key].path != out[sib].path, (f.key, out[f.key].path)
    # each flow on a probed port of its path, one 5-tuple per flow, valid plan
    assert all(out[k].udp_sport in seen[(a.src_node, a.dst_node, out[k].path)] for k, a in asg.items())
    assert plan_problems(view, flows, out, seen) == []
