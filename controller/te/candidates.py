"""Candidate routes of a flow: a NIC port on each end, an equal-cost path and a source port
that puts the flow on exactly that path.

Model mode samples RoCEv2 source ports 49152.. in ascending order through `c4-ref-v1` until
every equal-cost path of the port pair has one (deterministic: the same fabric gives the same
ports). Probed mode takes the ports a fresh probe saw on each path (`probes.ProbeBook`). A path
with no known port is not a candidate. Pure: the caches here live as long as the caller keeps
the object, which is tied to one `FabricView` (a link change means a new view).
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import sha256
from itertools import pairwise
from typing import Protocol

from controller.domain.fabric import (
    ROCE_DST_PORT,
    ROCE_SPORT_MAX,
    ROCE_SPORT_MIN,
    Fabric,
    HashingMode,
)
from controller.topology.graph import FabricView, Path
from controller.topology.hashing import ref_v1_path

Nic = tuple[str, str]
DirectedLink = tuple[str, str]
MAX_SPORT_TRIES = 4096


@dataclass(frozen=True, slots=True)
class Route:
    """One candidate: ports, node path, source port, and the links it crosses in order."""

    src_node: str
    dst_node: str
    path: Path
    sport: int
    links: tuple[str, ...]
    directed: tuple[DirectedLink, ...]


class PortSource(Protocol):
    def sports(self, src_node: str, dst_node: str, paths: list[Path]) -> dict[Path, int]: ...


class ModelPorts:
    """Source ports from the `c4-ref-v1` hash model, cached per (src, dst) port pair."""

    def __init__(self, view: FabricView, max_tries: int = MAX_SPORT_TRIES) -> None:
        self.view = view
        self.max_tries = max_tries
        self._cache: dict[tuple[str, str], dict[Path, int]] = {}

    def sports(self, src_node: str, dst_node: str, paths: list[Path]) -> dict[Path, int]:
        key = (src_node, dst_node)
        found = self._cache.get(key)
        if found is None:
            found = self._sample(src_node, dst_node, set(paths))
            self._cache[key] = found
        return found

    def _sample(self, src_node: str, dst_node: str, wanted: set[Path]) -> dict[Path, int]:
        """`hashing.ref_v1_path` for ports 49152.. in order, hashing only where there is a choice.

        Same arithmetic as the reference (a unit test holds them equal); it is inlined because
        planning 16k flows samples a few hundred thousand ports.
        """
        view = self.view
        src, dst = view.ports[src_node], view.ports[dst_node]
        found: dict[Path, int] = {}
        if not wanted:
            return found
        suffix = f"|{ROCE_DST_PORT}".encode()
        # per switch on the way: (next hops, hash prefix); built once per pair
        table: dict[str, tuple[tuple[str, ...], bytes]] = {}
        for p in wanted:
            for here in p[1:-2]:
                if here not in table:
                    seed = view.switches[here].ecmp_seed
                    table[here] = (view.next_hops(here, dst.switch), f"{seed}|{src.address}|{dst.address}|17|".encode())
        end = dst.switch
        last = min(ROCE_SPORT_MAX, ROCE_SPORT_MIN + self.max_tries - 1)
        for sport in range(ROCE_SPORT_MIN, last + 1):
            tail = b"%d%s" % (sport, suffix)
            here, nodes = src.switch, [src_node, src.switch]
            while here != end:
                step = table.get(here)
                if step is None:
                    break
                hops, prefix = step
                here = hops[0] if len(hops) == 1 else hops[int.from_bytes(sha256(prefix + tail).digest()[:8], "big") % len(hops)]
                nodes.append(here)
            nodes.append(dst_node)
            path = tuple(nodes)
            if path in wanted and path not in found:
                found[path] = sport
                if len(found) == len(wanted):
                    break
        return found


class Candidates:
    """Candidate routes between NICs over the fabric as it is (links that are up only)."""

    def __init__(self, view: FabricView, ports: PortSource | None = None) -> None:
        self.view = view
        self.ports: PortSource = ports if ports is not None else ModelPorts(view)
        self._nic_ports: dict[Nic, list[str]] = {}
        for p in view.ports.values():
            self._nic_ports.setdefault((p.host, p.nic), []).append(p.node)
        for nodes in self._nic_ports.values():
            nodes.sort()
        self._pairs: dict[tuple[str, str], tuple[Route, ...]] = {}
        self._core: dict[tuple[str, str], list[tuple[tuple[str, ...], tuple[str, ...], tuple[DirectedLink, ...]]]] = {}
        self._nics: dict[tuple[Nic, Nic], tuple[Route, ...]] = {}

    def path_ok(self, src_node: str, dst_node: str, path: Path) -> bool:
        """Whether `path` is an equal-cost path over up links between the two ports now."""
        view = self.view
        if len(path) < 3 or path[0] != src_node or path[-1] != dst_node:
            return False
        if not (view.port_up(src_node) and view.port_up(dst_node)):
            return False
        src_leaf, dst_leaf = view.ports[src_node].switch, view.ports[dst_node].switch
        if path[1] != src_leaf or path[-2] != dst_leaf:
            return False
        return all(v in view.next_hops(u, dst_leaf) for u, v in pairwise(path[1:-1]))

    def port_for(self, src_node: str, dst_node: str, path: Path, sport: int) -> int | None:
        """A source port for one known-good path without sampling the whole pair: the given
        port if it still hashes there, else the first that does (model mode only)."""
        known = self._pairs.get((src_node, dst_node))
        if known is not None:
            return next((r.sport for r in known if r.path == path), None)
        if not isinstance(self.ports, ModelPorts):
            return next((r.sport for r in self.port_routes(src_node, dst_node) if r.path == path), None)
        if ref_v1_path(self.view, src_node, dst_node, sport) == path:
            return sport
        return self.ports._sample(src_node, dst_node, {path}).get(path)

    def inherit(self, old: Candidates) -> int:
        """Reuse `old`'s routes for port pairs the change did not touch; returns how many.

        A pair's routes carry over when both ports are still up and every switch on its old
        paths has the same equal-cost next hops toward the destination leaf: then the path set
        is the same and every source port still hashes onto its path. Only for model ports.
        """
        if not isinstance(self.ports, ModelPorts) or not isinstance(old.ports, ModelPorts):
            return 0
        kept = 0
        same_hops: dict[tuple[str, str], bool] = {}
        for (s, d), routes in old._pairs.items():
            if not routes or not (self.view.port_up(s) and self.view.port_up(d)):
                continue
            dst_leaf = routes[0].path[-2]
            ok = True
            for sw in {n for r in routes for n in r.path[1:-2]}:
                key = (sw, dst_leaf)
                if key not in same_hops:
                    same_hops[key] = self.view.next_hops(sw, dst_leaf) == old.view.next_hops(sw, dst_leaf)
                if not same_hops[key]:
                    ok = False
                    break
            if ok:
                self._pairs[(s, d)] = routes
                kept += 1
        return kept

    def up_ports(self, nic: Nic) -> list[str]:
        """The NIC's ports whose own link is up, sorted."""
        return [n for n in self._nic_ports.get(nic, []) if self.view.port_up(n)]

    def port_routes(self, src_node: str, dst_node: str) -> tuple[Route, ...]:
        key = (src_node, dst_node)
        routes = self._pairs.get(key)
        if routes is None:
            view = self.view
            if not (view.port_up(src_node) and view.port_up(dst_node)):
                routes = ()
            else:
                s, d = view.ports[src_node].switch, view.ports[dst_node].switch
                first, last = view.link_between(src_node, s), view.link_between(d, dst_node)
                head = ((first.name, "ab" if first.a == src_node else "ba"),)
                tail = ((last.name, "ab" if last.a == d else "ba"),)
                full = [((src_node, *sw, dst_node), (first.name, *names, last.name), head + hops + tail)
                        for sw, names, hops in self.switch_paths(s, d)]
                full.sort()
                sports = self.ports.sports(src_node, dst_node, [p for p, _, _ in full])
                routes = tuple(Route(src_node, dst_node, p, sports[p], names, hops)
                               for p, names, hops in full if p in sports)
            self._pairs[key] = routes
        return routes

    def switch_paths(self, s: str, d: str) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[DirectedLink, ...]]]:
        """Equal-cost switch paths from leaf s to leaf d with their link names and directions."""
        key = (s, d)
        out = self._core.get(key)
        if out is None:
            view = self.view
            out = []
            stack: list[tuple[str, ...]] = [(s,)]
            while stack:
                prefix = stack.pop()
                if prefix[-1] == d:
                    names = view.links_of(prefix)
                    out.append((prefix, names, view.directed_links_of(prefix)))
                    continue
                stack += [(*prefix, n) for n in view.next_hops(prefix[-1], d)]
            out.sort()
            self._core[key] = out
        return out

    def nic_routes(self, src: Nic, dst: Nic) -> tuple[Route, ...]:
        """Every route for every (src port, dst port) combination, sorted by ports then path."""
        key = (src, dst)
        routes = self._nics.get(key)
        if routes is None:
            out: list[Route] = []
            for s in self.up_ports(src):
                for d in self.up_ports(dst):
                    out += self.port_routes(s, d)
            routes = tuple(out)
            self._nics[key] = routes
        return routes

    def still_valid(self, route: Route) -> bool:
        """Whether the route is up and its source port still gives its path on this fabric."""
        known = self._pairs.get((route.src_node, route.dst_node))
        if known is not None and route in known:
            return True
        if not all(self.view.links[name].state == "up" for name in route.links):
            return False
        if self.view.fabric.hashing.mode == HashingMode.MODEL:
            return ref_v1_path(self.view, route.src_node, route.dst_node, route.sport) == route.path
        return any(r == route for r in self.port_routes(route.src_node, route.dst_node))


def for_fabric(fabric: Fabric, ports: PortSource | None = None) -> Candidates:
    """Candidates over a fresh view of `fabric` (model ports unless `ports` is given)."""
    return Candidates(FabricView(fabric), ports)
