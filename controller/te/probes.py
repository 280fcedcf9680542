"""Probed mode: what node agents' path probes taught us, as source ports for candidate routes.

A probe report names, for a (source address, destination address) pair and a source port,
the addresses of the hops that answered. `hops_to_path` maps them to switches (through the
links' interface addresses and switches' management addresses) and gives the node path;
a `ProbeBook` over the fresh entries (younger than the time-to-live at `now_us`) is the
`PortSource` that `candidates.Candidates` uses instead of the hash model. `missing_pairs`
names the address pairs whose equal-cost paths are not all covered by a fresh probe.
Pure: entries come in as values (the service reads and writes the table), `now_us` is given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from controller.topology.graph import FabricView, Path

DEFAULT_TTL_S = 600.0


@dataclass(frozen=True, slots=True)
class ProbeEntry:
    src_address: str
    dst_address: str
    sport: int
    path: Path
    t_us: int


def switch_addresses(view: FabricView) -> dict[str, str]:
    """Interface and management address -> switch name."""
    out: dict[str, str] = {}
    for s in view.switches.values():
        if s.mgmt_address:
            out[s.mgmt_address] = s.name
    for link in view.fabric.links:
        if link.is_host_link:
            continue
        if link.a_address:
            out[link.a_address] = link.a
        if link.b_address:
            out[link.b_address] = link.b
    return out


def hops_to_path(view: FabricView, src_address: str, dst_address: str, hops: Iterable[str],
                 addresses: dict[str, str] | None = None) -> Path | None:
    """The node path a probe saw, or None if a hop is unknown or the ends are not host ports."""
    src, dst = view.ports_by_address.get(src_address), view.ports_by_address.get(dst_address)
    if src is None or dst is None:
        return None
    table = addresses if addresses is not None else switch_addresses(view)
    switches: list[str] = []
    for hop in hops:
        if hop == dst_address:
            break
        name = table.get(hop)
        if name is None:
            return None
        if not switches or switches[-1] != name:
            switches.append(name)
    if not switches or switches[0] != src.switch or switches[-1] != dst.switch:
        return None
    return (src.node, *switches, dst.node)


class ProbeBook:
    """Fresh probe entries as a source-port oracle: the lowest port a probe saw on each path."""

    def __init__(self, view: FabricView, entries: Iterable[ProbeEntry], now_us: int,
                 ttl_s: float = DEFAULT_TTL_S) -> None:
        self.view = view
        oldest = now_us - int(ttl_s * 1_000_000)
        self._seen: dict[tuple[str, str, Path], set[int]] = defaultdict(set)
        for e in entries:
            if e.t_us >= oldest:
                self._seen[(e.path[0], e.path[-1], e.path)].add(e.sport)

    def sports(self, src_node: str, dst_node: str, paths: list[Path]) -> dict[Path, int]:
        out = {}
        for p in paths:
            seen = self._seen.get((src_node, dst_node, p))
            if seen:
                out[p] = min(seen)
        return out

    def seen(self) -> dict[tuple[str, str, Path], set[int]]:
        """(src node, dst node, path) -> ports, the shape the validator takes."""
        return dict(self._seen)

    def missing_pairs(self, port_pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """(src address, dst address) pairs with an equal-cost path no fresh probe covers, sorted."""
        out = set()
        for s, d in port_pairs:
            paths = self.view.equal_cost_paths(s, d)
            if any(not self._seen.get((s, d, p)) for p in paths):
                out.add((self.view.ports[s].address, self.view.ports[d].address))
        return sorted(out)
