"""The exact structure of healthy 2-tier fabrics: choose NIC ports, then colour spines.

On a leaf-spine fabric where every leaf reaches every spine over equal, up links, the spine of
a cross-leaf flow is a colour: with K = max over leaves of ceil(flows up or down / spines),
a proper edge colouring of the bipartite multigraph (source leaves, destination leaves) with
S*K colours exists (König) and is found by alternating paths; colour c is spine c // K, so no
leaf-spine link direction carries more than ceil(its leaf's degree / S) flows — the least
possible for those port choices. The port choice is solved on a reduced instance whose only
fabric links are one virtual up and one virtual down link per leaf of capacity S * c (the same
greedy, local search and CP-SAT). Pure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from controller.domain.fabric import LinkState, SwitchRole
from controller.te.candidates import Route
from controller.te.instance import Instance, IntArray
from controller.topology.graph import FabricView


def uniform_spines(view: FabricView) -> tuple[list[str], float] | None:
    """(spines, link capacity) when every leaf-spine link exists, is up and equal; else None."""
    roles = {s.name: s.role for s in view.fabric.switches}
    if SwitchRole.CORE in roles.values():
        return None
    leaves = sorted(n for n, r in roles.items() if r == SwitchRole.LEAF)
    spines = sorted(n for n, r in roles.items() if r == SwitchRole.SPINE)
    caps = set()
    for leaf in leaves:
        for spine in spines:
            try:
                link = view.link_between(leaf, spine)
            except KeyError:
                return None
            if link.state != LinkState.UP:
                return None
            caps.add(link.capacity_gbps)
    if len(caps) != 1 or not spines or len(leaves) * len(spines) != sum(1 for x in view.fabric.links if not x.is_host_link):
        return None
    return spines, caps.pop()


def reduce(inst: Instance, spines: list[str], capacity_gbps: float) -> Instance:
    """The port-choice instance: routes are port pairs; fabric links are virtual per leaf."""
    links = sorted({d for g in inst.groups for r in g.routes for d in (r.directed[0], r.directed[-1])})
    leaves = sorted({r.path[1] for g in inst.groups for r in g.routes} | {r.path[-2] for g in inst.groups for r in g.routes})
    virtual = [(f"up:{leaf}", "ab") for leaf in leaves] + [(f"down:{leaf}", "ab") for leaf in leaves]
    all_links = links + virtual
    index = {d: i for i, d in enumerate(all_links)}
    old = inst.link_index()
    caps = [float(inst.capacity_gbps[old[d]]) for d in links] + [capacity_gbps * len(spines)] * len(virtual) + [np.inf]
    groups, route_links = [], []
    for g in inst.groups:
        seen: dict[tuple[str, str], Route] = {}
        for r in g.routes:
            if (r.src_node, r.dst_node) in seen:
                continue
            s, d = r.path[1], r.path[-2]
            hops = (r.directed[0], r.directed[-1]) if s == d else (r.directed[0], (f"up:{s}", "ab"), (f"down:{d}", "ab"), r.directed[-1])
            seen[(r.src_node, r.dst_node)] = Route(r.src_node, r.dst_node, (r.src_node, s, d, r.dst_node), 0, (), hops)
        routes = tuple(seen.values())
        width = max(len(r.directed) for r in routes)
        m = np.full((len(routes), width), len(all_links), dtype=np.int64)
        for i, r in enumerate(routes):
            m[i, : len(r.directed)] = [index[x] for x in r.directed]
        groups.append(replace(g, routes=routes))
        route_links.append(m)
    return Instance(tuple(all_links), np.array(caps), np.zeros(len(caps)), tuple(groups), route_links, {}, dict(inst.port_base))


def colour(edges: list[tuple[str, str]], colours: int) -> list[int]:
    """A proper edge colouring of a bipartite multigraph (left, right) with `colours` >= max degree."""
    at_left: dict[str, dict[int, int]] = defaultdict(dict)
    at_right: dict[str, dict[int, int]] = defaultdict(dict)
    out = [-1] * len(edges)
    for e, (u, v) in enumerate(edges):
        a = next(c for c in range(colours) if c not in at_left[u])
        b = next(c for c in range(colours) if c not in at_right[v])
        if a not in at_right[v]:
            out[e] = a
            at_left[u][a] = e
            at_right[v][a] = e
            continue
        # flip the a/b alternating path that starts at v with its a-edge; then a is free at v
        path, side, node, want = [], "right", v, a
        while True:
            table = at_right if side == "right" else at_left
            nxt = table[node].get(want)
            if nxt is None:
                break
            path.append(nxt)
            lu, lv = edges[nxt]
            node, side = (lu, "left") if side == "right" else (lv, "right")
            want = b if want == a else a
        for x in path:
            lu, lv = edges[x]
            c = out[x]
            del at_left[lu][c]
            del at_right[lv][c]
        for x in path:
            lu, lv = edges[x]
            c = b if out[x] == a else a
            out[x] = c
            at_left[lu][c] = x
            at_right[lv][c] = x
        out[e] = a
        at_left[u][a] = e
        at_right[v][a] = e
    return out


def expand(inst: Instance, reduced: Instance, counts: list[IntArray], spines: list[str]) -> list[IntArray] | None:
    """Counts on the real instance: the reduced port choices with spines from a colouring
    (None when a coloured path has no known source port)."""
    flows: list[tuple[int, Route]] = []
    for gi, (g, c) in enumerate(zip(reduced.groups, counts, strict=True)):
        for ri in np.flatnonzero(c):
            flows += [(gi, g.routes[int(ri)])] * int(c[ri])
    cross = [i for i, (_, r) in enumerate(flows) if r.path[1] != r.path[2]]
    edges = [(flows[i][1].path[1], flows[i][1].path[2]) for i in cross]
    up: dict[str, int] = defaultdict(int)
    down: dict[str, int] = defaultdict(int)
    for s, d in edges:
        up[s] += 1
        down[d] += 1
    k = max([-(-n // len(spines)) for n in list(up.values()) + list(down.values())] or [1])
    colours = colour(edges, len(spines) * k)
    spine_of = {i: spines[c // k] for i, c in zip(cross, colours, strict=True)}
    out = [np.zeros(len(g.routes), dtype=np.int64) for g in inst.groups]
    where = [{(r.src_node, r.dst_node, r.path[2] if len(r.path) == 5 else ""): i for i, r in enumerate(g.routes)}
             for g in inst.groups]
    for i, (gi, r) in enumerate(flows):
        at = where[gi].get((r.src_node, r.dst_node, spine_of.get(i, "")))
        if at is None:
            return None
        out[gi][at] += 1
    return out


MAX_EDGES = 20_000


def applies(inst: Instance, view: FabricView) -> tuple[list[str], float] | None:
    """The spines and their link capacity when the exact 2-tier method applies to `inst`."""
    if float(inst.background_gbps.sum()) > 0 or len({g.demand_gbps for g in inst.groups}) != 1:
        return None
    if inst.n_flows > MAX_EDGES or inst.current or not inst.complete:
        return None  # (a large instance's routes are some paths only: a colour may have none)
    return uniform_spines(view)
