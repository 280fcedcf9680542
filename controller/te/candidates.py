"""Candidate routes of a flow: a NIC port on each end, an equal-cost path and a source port
that puts the flow on exactly that path.

Model mode samples RoCEv2 source ports 49152.. in ascending order through `c4-ref-v1` until
every equal-cost path of the port pair has one (deterministic: the same fabric gives the same
ports). Probed mode takes the ports a fresh probe saw on each path (`probes.ProbeBook`). A path
with no known port is not a candidate. Pure: the caches here live as long as the caller keeps
the object, which is tied to one `FabricView` (a link change means a new view).
"""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

from controller.domain.fabric import Fabric, HashingMode
from controller.te.ports import ModelPorts, PortSource
from controller.topology.graph import FabricView, Path
from controller.topology.hashing import ref_v1_path

Nic = tuple[str, str]
DirectedLink = tuple[str, str]
UNKNOWN = -1  # `Route.sport` not looked up yet


class Route(NamedTuple):
    """One candidate: ports, node path, source port, and the links it crosses in order.

    A named tuple, not a dataclass: a large instance holds hundreds of thousands. `sport` is
    `UNKNOWN` for a route whose source port is looked up only if the planner chooses it
    (`Candidates.path_routes`, `Candidates.sport_for`)."""

    src_node: str
    dst_node: str
    path: Path
    sport: int
    links: tuple[str, ...]
    directed: tuple[DirectedLink, ...]


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
        self._prev: FabricView | None = None  # the view `inherit` carried routes over from
        self._prev_pairs: dict[tuple[str, str], tuple[Route, ...]] = {}  # and its routes
        # The pairs `inherit` carried over (the change touched none of their paths, so an
        # assignment valid on the inherited view is valid now as it is); unlike `_pairs`, never
        # grown by later computations on this object.
        self._inherited: dict[tuple[str, str], tuple[Route, ...]] = {}
        self._changed: dict[tuple[str, str], bool] = {}
        self._changed_paths: dict[tuple[str, ...], bool] = {}
        self._core_ok: dict[tuple[str, ...], bool] = {}  # `path_ok` of switch paths (one view)
        self._partial: set[tuple[str, str]] = set()
        self._up: dict[Nic, list[str]] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._ends: dict[tuple[str, bool], tuple[str, str, DirectedLink]] = {}  # pairs with an equal-cost path no known port reaches

    # --- what a re-plan reads (`te.replan`) ----------------------------------------------

    @property
    def hashed_by_model(self) -> bool:
        """Whether source ports come from the hash model (`ModelPorts`), not from probes."""
        return self.view.fabric.hashing.mode == HashingMode.MODEL and isinstance(self.ports, ModelPorts)

    def known_routes(self, src_node: str, dst_node: str) -> tuple[Route, ...] | None:
        """The pair's routes if they are computed or inherited already (None: not yet; this
        never computes them, `port_routes` does)."""
        return self._pairs.get((src_node, dst_node))

    def untouched(self, pair: tuple[str, str]) -> bool:
        """Whether `inherit` carried the pair over: the change touched none of its paths, so an
        assignment of it that was valid on the inherited view is valid now as it is."""
        return pair in self._inherited

    def first_ports(self, src_node: str, dst_node: str, paths: set[Path]) -> dict[Path, int]:
        """Model mode: the first source port that puts the flow on each of `paths` now (paths
        with none within the sampling limit are left out)."""
        assert isinstance(self.ports, ModelPorts)
        return self.ports.first_ports(src_node, dst_node, paths)

    def path_changed(self, path: Path) -> bool:
        """Whether any switch of `path` (host ports at both ends) changed its next hops toward
        the path's last leaf since the inherited view."""
        return self._core_changed(path[1:-1])

    def _core_changed(self, core: tuple[str, ...]) -> bool:
        """`path_changed` of a switch path (leaf to leaf)."""
        hit = self._changed_paths.get(core)
        if hit is None:
            hit = any(self.hops_changed(u, core[-1]) for u in core[:-1])
            self._changed_paths[core] = hit
        return hit

    def hops_changed(self, switch: str, dst_leaf: str) -> bool:
        """Whether the switch's equal-cost next hops toward `dst_leaf` differ from the view
        routes were inherited from (True when nothing was inherited)."""
        key = (switch, dst_leaf)
        hit = self._changed.get(key)
        if hit is None:
            prev = self._prev
            hit = prev is None or prev.next_hops(switch, dst_leaf) != self.view.next_hops(switch, dst_leaf)
            self._changed[key] = hit
        return hit

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
        core = path[1:-1]
        ok = self._core_ok.get(core)
        if ok is None:  # the switch part alone decides the rest: shared by every pair of the two leaves
            ok = self._core_ok[core] = all(v in view.next_hops(u, dst_leaf) for u, v in pairwise(core))
        return ok

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
        return self.ports.first_ports(src_node, dst_node, {path}).get(path)

    def inherit(self, old: Candidates) -> int:
        """Reuse `old`'s routes for port pairs the change did not touch; returns how many.

        A pair's routes carry over when both ports are still up and every switch on its old
        paths has the same equal-cost next hops toward the destination leaf: then the path set
        is the same and every source port still hashes onto its path. Only for model ports.
        """
        if not isinstance(self.ports, ModelPorts) or not isinstance(old.ports, ModelPorts):
            return 0
        self.ports.hashes = old.ports.hashes  # hash values do not depend on the fabric's state
        # A copy (atomic under the GIL): another thread may still be filling `old`'s caches
        # (the planner's summary refresh uses the previous revision's candidates while a link
        # PATCH inherits them).
        self._prev, self._prev_pairs = old.view, dict(old._pairs)
        self._changed.clear()
        self._changed_paths.clear()
        kept = 0
        same: dict[tuple[str, str], bool] = {}  # per (source leaf, destination leaf)
        view, before = self.view, old.view
        for (s, d), routes in self._prev_pairs.items():
            if not routes or not (view.port_up(s) and view.port_up(d)):
                continue
            leaves = (routes[0].path[1], routes[0].path[-2])
            ok = same.get(leaves)
            if ok is None:
                ok = same[leaves] = _same_hops_between(before, view, *leaves)
            if ok:
                self._pairs[(s, d)] = self._inherited[(s, d)] = routes
                if (s, d) in old._partial:
                    self._partial.add((s, d))
                kept += 1
        return kept

    def up_ports(self, nic: Nic) -> list[str]:
        """The NIC's ports whose own link is up, sorted."""
        hit = self._up.get(nic)
        if hit is None:
            hit = self._up[nic] = [n for n in self._nic_ports.get(nic, []) if self.view.port_up(n)]
        return hit

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
                switch_paths = self.switch_paths(s, d)
                ports = self.ports
                old = self._prev_pairs.get(key) if isinstance(ports, ModelPorts) else None
                kept: dict[tuple[str, ...], Route] = {}
                if old is not None:
                    # Model mode: a path whose switches all kept their next hops since the
                    # inherited view keeps its old route as is (same links; the ports that hash
                    # onto it are the same, so the first of them is too); only the other paths
                    # are sampled.
                    by_core = {r.path[1:-1]: r for r in old}
                    for sw, _, _ in switch_paths:
                        r = by_core.get(sw)
                        if r is not None and not self._core_changed(sw):
                            kept[sw] = r
                full = [((src_node, *sw, dst_node), (first.name, *names, last.name), head + hops + tail)
                        for sw, names, hops in switch_paths if sw not in kept]
                if old is not None and isinstance(ports, ModelPorts):
                    sports = ports.first_ports(src_node, dst_node, {p for p, _, _ in full})
                else:
                    sports = ports.sports(src_node, dst_node, [p for p, _, _ in sorted(full)])
                made = [Route(src_node, dst_node, p, sports[p], names, hops) for p, names, hops in full if p in sports]
                routes = tuple(sorted([*kept.values(), *made], key=lambda r: r.path))
                if len(routes) < len(switch_paths):
                    self._partial.add(key)
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

    # --- large instances: routes whose source port is looked up only if chosen ----------

    def path_count(self, src_node: str, dst_node: str) -> int:
        """How many equal-cost paths join two ports now (0 if either is down); no routes made."""
        view = self.view
        if not (view.port_up(src_node) and view.port_up(dst_node)):
            return 0
        return self.leaf_path_count(view.ports[src_node].switch, view.ports[dst_node].switch)

    def leaf_path_count(self, src_leaf: str, dst_leaf: str) -> int:
        """How many equal-cost switch paths join two leaves now."""
        key = (src_leaf, dst_leaf)
        hit = self._counts.get(key)
        if hit is None:
            hit = self._counts[key] = len(self.switch_paths(*key))
        return hit

    def path_routes(self, src_node: str, dst_node: str, k: int | None = None, offset: int = 0) -> tuple[Route, ...]:
        """Routes over `k` of the pair's equal-cost paths (all: None), from position `offset`
        of the sorted paths on, wrapping; their source port is `UNKNOWN` unless the pair was
        sampled already (`sport_for` looks it up for a chosen route). For instances too large
        to sample every path of every pair (an all-to-all of 128 ranks has 16k NIC pairs)."""
        known = self._pairs.get((src_node, dst_node))
        view = self.view
        if not (view.port_up(src_node) and view.port_up(dst_node)):
            return ()
        s, head_name, head = self._end(src_node, True)
        d, tail_name, tail = self._end(dst_node, False)
        switch_paths = self.switch_paths(s, d)
        n = len(switch_paths)
        if not n:
            return ()
        picked = switch_paths if k is None or k >= n else [switch_paths[(offset + i) % n] for i in range(k)]
        if known is not None:
            by_core = {r.path[1:-1]: r for r in known}
            return tuple(by_core[sw] for sw, _, _ in picked if sw in by_core)
        return tuple(Route(src_node, dst_node, (src_node, *sw, dst_node), UNKNOWN, (head_name, *names, tail_name),
                           (head, *hops, tail)) for sw, names, hops in picked)

    def _end(self, node: str, up: bool) -> tuple[str, str, DirectedLink]:
        """A port's leaf, its link's name and the direction toward the leaf (`up`) or from it."""
        hit = self._ends.get((node, up))
        if hit is None:
            leaf = self.view.ports[node].switch
            link = self.view.link_between(node, leaf)
            towards = "ab" if link.a == node else "ba"
            hit = self._ends[(node, up)] = (leaf, link.name, (link.name, towards if up else
                                                              ("ba" if towards == "ab" else "ab")))
        return hit

    def sport_for(self, route: Route) -> int | None:
        """The route's source port: its own if known, else (model mode) the first port that
        puts the flow on its path, as a full sampling of the pair would give. None: no port
        within the sampling limit (the route cannot be used)."""
        if route.sport != UNKNOWN:
            return route.sport
        known = self._pairs.get((route.src_node, route.dst_node))
        if known is not None:
            return next((r.sport for r in known if r.path == route.path), None)
        if not isinstance(self.ports, ModelPorts):
            return None
        return self.ports.first_port(route.src_node, route.dst_node, route.path)

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

    def nic_complete(self, src: Nic, dst: Nic) -> bool:
        """Whether `nic_routes(src, dst)` holds every equal-cost path of every up port pair
        (in probed mode, only once every path was probed)."""
        return not any((s, d) in self._partial for s in self.up_ports(src) for d in self.up_ports(dst))

    def hashes_onto(self, src_node: str, dst_node: str, path: Path, sport: int) -> bool:
        """Whether `sport` puts the flow on `path` now (a path known to be up and equal-cost):
        `c4-ref-v1` in model mode, a fresh probe in probed mode."""
        if self.view.fabric.hashing.mode == HashingMode.MODEL:
            return ref_v1_path(self.view, src_node, dst_node, sport) == path
        return any(r.path == path and r.sport == sport for r in self.port_routes(src_node, dst_node))


def _same_hops_between(before: FabricView, after: FabricView, src_leaf: str, dst_leaf: str) -> bool:
    """Whether every switch on an equal-cost path from `src_leaf` to `dst_leaf` in `before`
    has the same next hops toward `dst_leaf` in `after` (then every path between the two
    leaves, and every source port's path, is the same in both)."""
    seen, stack = {src_leaf}, [src_leaf]
    while stack:
        here = stack.pop()
        hops = before.next_hops(here, dst_leaf)
        if hops != after.next_hops(here, dst_leaf):
            return False
        for nxt in hops:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return True


def for_fabric(fabric: Fabric, ports: PortSource | None = None) -> Candidates:
    """Candidates over a fresh view of `fabric` (model ports unless `ports` is given)."""
    return Candidates(FabricView(fabric), ports)
