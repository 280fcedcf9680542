"""A networkx view of a fabric: equal-cost next hops and paths over links that are up.

Nodes are switch names and host-port nodes (`host:nic:port`). Host ports are never transit:
paths run port -> its leaf -> ... -> the destination port's leaf -> port. Next-hop sets are
the neighbours one hop closer to the destination leaf, sorted by name, exactly the sets the
hash model of API.md indexes into.

A view is built once per fabric value and caches distances per destination leaf; it never
changes the fabric (a link state change makes a new `Fabric` and a new view).
"""

from __future__ import annotations

import itertools
from functools import cached_property

import networkx as nx

from controller.domain.fabric import Fabric, Link, LinkState, PortRef, Switch

Path = tuple[str, ...]


class FabricView:
    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.switches: dict[str, Switch] = {s.name: s for s in fabric.switches}
        self.ports: dict[str, PortRef] = {p.node: p for p in fabric.ports()}
        self.ports_by_address: dict[str, PortRef] = {p.address: p for p in self.ports.values()}
        self.links: dict[str, Link] = {link.name: link for link in fabric.links}
        self._between: dict[tuple[str, str], Link] = {}
        self._directed: dict[Path, tuple[tuple[str, str], ...]] = {}  # `directed_links_of`, memoised
        for link in fabric.links:
            self._between[(link.a, link.b)] = link
            self._between[(link.b, link.a)] = link
        self._dist: dict[str, dict[str, int]] = {}
        self._hops: dict[tuple[str, str], tuple[str, ...]] = {}

    @cached_property
    def switch_graph(self) -> nx.Graph[str]:
        """Switches joined by the switch-to-switch links that are up."""
        g: nx.Graph[str] = nx.Graph()
        g.add_nodes_from(sorted(self.switches))
        for link in self.fabric.links:
            if not link.is_host_link and link.state == LinkState.UP:
                g.add_edge(link.a, link.b, name=link.name)
        return g

    def link_between(self, u: str, v: str) -> Link:
        return self._between[(u, v)]

    def port_up(self, node: str) -> bool:
        port = self.ports[node]
        return self._between[(node, port.switch)].state == LinkState.UP

    def distances_to(self, leaf: str) -> dict[str, int]:
        if leaf not in self._dist:
            self._dist[leaf] = dict(nx.single_source_shortest_path_length(self.switch_graph, leaf))
        return self._dist[leaf]

    def next_hops(self, switch: str, dst_leaf: str) -> tuple[str, ...]:
        """Neighbours of `switch` on shortest paths to `dst_leaf` over up links, sorted by name."""
        key = (switch, dst_leaf)
        hops = self._hops.get(key)
        if hops is None:
            dist = self.distances_to(dst_leaf)
            here = dist.get(switch)
            if here is None or here == 0:
                hops = ()
            else:
                hops = tuple(sorted(n for n in self.switch_graph.neighbors(switch) if dist.get(n) == here - 1))
            self._hops[key] = hops
        return hops

    def equal_cost_paths(self, src_node: str, dst_node: str) -> list[Path]:
        """Every shortest path from one host port to another, sorted; [] if none is up."""
        src, dst = self.ports[src_node], self.ports[dst_node]
        if not (self.port_up(src_node) and self.port_up(dst_node)):
            return []
        if src.switch == dst.switch:
            return [(src_node, src.switch, dst_node)]
        if dst.switch not in self.distances_to(src.switch):
            return []
        paths = nx.all_shortest_paths(self.switch_graph, src.switch, dst.switch)
        return sorted((src_node, *p, dst_node) for p in paths)

    def links_of(self, path: Path) -> tuple[str, ...]:
        """The link names a path crosses, in order."""
        return tuple(self._between[(u, v)].name for u, v in itertools.pairwise(path))

    def directed_links_of(self, path: Path) -> tuple[tuple[str, str], ...]:
        """(link name, direction) per hop; direction is "ab" when going from `a` to `b`.
        Memoised per path (the summaries and background passes ask it for every active
        flow; a view's links never change)."""
        if type(path) is not tuple:
            path = tuple(path)
        hit = self._directed.get(path)
        if hit is not None:
            return hit
        out = []
        for u, v in itertools.pairwise(path):
            link = self._between[(u, v)]
            out.append((link.name, "ab" if link.a == u else "ba"))
        self._directed[path] = got = tuple(out)
        return got
