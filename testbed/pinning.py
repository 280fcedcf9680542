"""Hand-pinned source ports: every flow of a job on a spine of its own, found by probing the
kernels' real hash with packets, not by a model.

1. `ring_flows` lists a ring's network flows: (source address, destination address, channel,
   socket index) for every connection between ranks on different leaves.
2. `probe_spines` sends TTL-limited TCP SYNs with the flows' own protocol and destination port
   (the shim's listen port) from each source, one per candidate source port, and reads which
   spine answered: the path the source leaf's kernel hashes that 5-tuple onto.
3. `assign_spines` colours the flows with spines so that at every leaf, outbound and inbound,
   each spine carries as equal a share of the flows as possible (an equitable edge colouring
   of the leaf-to-leaf bipartite multigraph: pad it to a regular one, peel perfect matchings,
   deal the matchings out to the spines in turn), the hand-made plan a network engineer would
   write on a non-blocking fabric.
4. `pins_for` picks, per flow, a probed port that the source leaf sends to its spine, distinct
   per (source, destination): the static agent's table (`JobSpec.pins`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from testbed.fabric import Testbed, TestbedError
from testbed.traffic import spines_by_sport

PROBE_PORTS = list(range(50000, 50064))  # in the RoCE range hosts keep free of ephemeral ports
PPM = 1_000_000


@dataclass(frozen=True, order=True)
class FlowKey:
    src: str
    dst: str
    channel: int
    index: int  # socket index within the connection


def ring_flows(tb: Testbed, rank_addresses: list[list[str]], channels: int, k: int) -> list[FlowKey]:
    """The ring's flows that cross the spines: rank r to r+1 on every channel c, between the
    ranks' NIC ports for that channel (channel c uses port c mod the rank's port count, as
    the workload does), K sockets each; flows within one leaf never reach a spine."""
    plan = tb.plan
    n = len(rank_addresses)
    out = []
    for r in range(n if n > 1 else 0):
        mine, theirs = rank_addresses[r], rank_addresses[(r + 1) % n]
        for c in range(channels):
            src, dst = mine[c % len(mine)], theirs[c % len(theirs)]
            if plan.port_by_address(src).leaf == plan.port_by_address(dst).leaf:
                continue
            out += [FlowKey(src, dst, c, i) for i in range(k)]
    return out


def probe_spines(tb: Testbed, pairs: set[tuple[str, str]], sports: list[int] | None = None) -> dict[tuple[str, str], dict[int, str]]:
    """(src, dst) -> {sport: spine} from real TTL-2 probes to the shim's port."""
    from testbed import kernel

    ports = sports or PROBE_PORTS

    def one(pair: tuple[str, str]) -> tuple[tuple[str, str], dict[int, str]]:
        seen = spines_by_sport(tb, pair[0], pair[1], ports)
        return pair, {s: sp for s, sp in seen.items() if sp}

    return dict(kernel.parallel(one, sorted(pairs)))


def assign_spines(tb: Testbed, flows: list[FlowKey]) -> dict[FlowKey, str]:
    plan = tb.plan
    spines = [s.name for s in plan.spines]
    leaf = {f: (plan.port_by_address(f.src).leaf, plan.port_by_address(f.dst).leaf) for f in flows}
    # Bipartite multigraph: "out:<leaf>" -- "in:<leaf>" per flow; pad to regular degree D.
    edges: list[tuple[str, str, FlowKey | None]] = [(f"out:{a}", f"in:{b}", f) for f, (a, b) in leaf.items()]
    deg: dict[str, int] = defaultdict(int)
    for u, v, _ in edges:
        deg[u] += 1
        deg[v] += 1
    outs = sorted({u for u, _, _ in edges} | {f"out:{x.name}" for x in plan.leaves})
    ins = sorted({v for _, v, _ in edges} | {f"in:{x.name}" for x in plan.leaves})
    d = max(deg.values(), default=0)
    # Pad with dummy edges between deficient vertices until every vertex has degree d.
    short_out = [u for u in outs for _ in range(d - deg[u])]
    short_in = [v for v in ins for _ in range(d - deg[v])]
    edges += [(u, v, None) for u, v in zip(short_out, short_in, strict=True)]
    remaining = defaultdict(list)
    for u, v, f in edges:
        remaining[(u, v)].append(f)
    colour: dict[FlowKey, str] = {}
    for m in range(d):
        g: nx.Graph[str] = nx.Graph()
        g.add_nodes_from(outs, bipartite=0)
        g.add_nodes_from(ins, bipartite=1)
        g.add_edges_from(key for key, fs in remaining.items() if fs)
        matching = nx.bipartite.hopcroft_karp_matching(g, top_nodes=outs)
        spine = spines[m % len(spines)]
        for u in outs:
            v = matching.get(u)
            if v is None:
                raise TestbedError("no perfect matching in a regular bipartite graph (bug)")
            f = remaining[(u, v)].pop()
            if f is not None:
                colour[f] = spine
    return colour


def pins_for(tb: Testbed, flows: list[FlowKey], channels: int, k: int,
             probes: dict[tuple[str, str], dict[int, str]] | None = None) -> dict[tuple[str, str, int], list[tuple[int, int]]]:
    """The static agent's table: (src, dst, channel) -> [(sport, weight_ppm)] per socket."""
    pairs = {(f.src, f.dst) for f in flows}
    table = probes if probes is not None else probe_spines(tb, pairs)
    spine_of = assign_spines(tb, flows)
    used: dict[tuple[str, str], set[int]] = defaultdict(set)
    share = [PPM // k + (1 if i < PPM % k else 0) for i in range(k)]
    pins: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for f in sorted(flows):
        want = spine_of[f]
        choice = next((p for p, sp in sorted(table[(f.src, f.dst)].items())
                       if sp == want and p not in used[(f.src, f.dst)]), None)
        if choice is None:
            raise TestbedError(f"no probed port of {f.src}->{f.dst} reaches {want}; probe more ports")
        used[(f.src, f.dst)].add(choice)
        pins.setdefault((f.src, f.dst, f.channel), []).append((choice, share[f.index]))
    return pins


def uplink_load(tb: Testbed, flows: list[FlowKey], spine_of: dict[FlowKey, str]) -> int:
    """The most flows any leaf uplink or spine downlink carries under `spine_of`."""
    plan = tb.plan
    load: dict[tuple[str, str], int] = defaultdict(int)
    for f in flows:
        a, b = plan.port_by_address(f.src).leaf, plan.port_by_address(f.dst).leaf
        load[(a, spine_of[f])] += 1
        load[(spine_of[f], b)] += 1
    return max(load.values(), default=0)
