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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from controller.domain.jobs import Assignment, FlowKey
from controller.topology.graph import FabricView, Path

DEFAULT_TTL_S = 600.0
NO_ANSWER = "*"  # a hop no reply came from (the node agent's prober writes it)


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
    """The node path a probe saw, or None if a hop is unknown or the ends are not host ports.

    Unanswered TTLs (`NO_ANSWER`) after the destination's own switch are allowed: from there
    the one link to the host port is the rest of the path. That is what a TCP probe of a live
    connection's own 5-tuple gets: the destination answers its SYN with a challenge ACK for
    the open connection, not a SYN-ACK the prober can match (seen on the testbed when the
    pairs of a running ring are re-probed after a link change). A gap before a switch that
    answered stays unknown."""
    src, dst = view.ports_by_address.get(src_address), view.ports_by_address.get(dst_address)
    if src is None or dst is None:
        return None
    table = addresses if addresses is not None else switch_addresses(view)
    switches: list[str] = []
    gap = False
    for hop in hops:
        if hop == dst_address:
            break
        if hop == NO_ANSWER:  # a TTL nobody answered: only trailing ones are allowed (below)
            gap = True
            continue
        name = table.get(hop)
        if name is None or gap:
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
        self._path: dict[tuple[str, str, int], Path] = {}
        for e in entries:
            if e.t_us >= oldest:
                self._seen[(e.path[0], e.path[-1], e.path)].add(e.sport)
                self._path[(e.path[0], e.path[-1], e.sport)] = e.path

    def path_of(self, src_node: str, dst_node: str, sport: int) -> Path | None:
        """The path a fresh probe saw this source port take (None: not probed, or no path)."""
        return self._path.get((src_node, dst_node, sport))

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


def distinct_sports(assignments: Mapping[FlowKey, Assignment], seen: Mapping[tuple[str, str, Path], set[int]],
                    current: Mapping[FlowKey, Assignment] | None = None) -> dict[FlowKey, Assignment]:
    """One 5-tuple per flow, for transports with a socket per flow (the shim's TCP transport).

    A path's probed ports all put a flow on that path, and the planner gives every flow of a
    path the same one (the lowest); for RoCE that is fine (QPs are told apart by QP number),
    but two TCP sockets from one address and port to one address and port are one 5-tuple:
    the second cannot connect, the shim falls back to an ephemeral port and the kernel's hash
    puts that flow anywhere (seen on the testbed: a planned ring at 0.65 of ideal, ECMP's
    level). So flows that share (source port, destination port, path) get distinct probed
    ports of that path: a flow keeps its current port when it is still on that path, probed
    and not taken, the others take the lowest free ones. A group with more flows than probed
    ports keeps the lowest port for the rest (as before). Only flows of one plan (one job) are
    told apart; two jobs between the same two addresses may still share a 5-tuple.
    """
    groups: dict[tuple[str, str, Path], list[FlowKey]] = defaultdict(list)
    for k, a in assignments.items():
        groups[(a.src_node, a.dst_node, a.path)].append(k)
    out = dict(assignments)
    for key, keys in groups.items():
        if len(keys) < 2:
            continue
        ports = sorted(seen.get(key, ()))
        if len(ports) < 2:
            continue
        own = [assignments[k].udp_sport for k in keys]
        if len(set(own)) == len(own) and all(p in ports for p in own):
            continue
        taken: set[int] = set()
        rest: list[FlowKey] = []
        for k in sorted(keys):
            old = current.get(k) if current else None
            if old is not None and old.path == key[2] and old.udp_sport in ports and old.udp_sport not in taken:
                taken.add(old.udp_sport)
                out[k] = replace(assignments[k], udp_sport=old.udp_sport)
            else:
                rest.append(k)
        free = iter(p for p in ports if p not in taken)
        for k in rest:
            port = next(free, ports[0])
            taken.add(port)
            out[k] = replace(assignments[k], udp_sport=port)
    return out


def spread_connections(view: FabricView, assignments: Mapping[FlowKey, Assignment],
                       seen: Mapping[tuple[str, str, Path], set[int]], demand: Mapping[FlowKey, float],
                       max_rounds: int = 100_000) -> dict[FlowKey, Assignment]:
    """Spread each NCCL connection's flows (one channel's QPs: `(src_rank, dst_rank, channel)`)
    over different paths, keeping the load of every link exactly as planned.

    Why: a plan is free to put all of a connection's flows on one path (every tie is as good
    for the plan's utilization), but then nothing can be shifted by weights while the sockets
    stay open: after a link failure (`te.failover`) or under congestion (`te.rebalance` step 1)
    the only fix would be new source ports, which live TCP connections cannot take (seen on
    the testbed: a throttled spine link held a planned ring at its throttled rate, 0.22 of
    ideal, with every connection's four flows on it).

    How: flows with the same demand whose paths leave from the same switch and arrive at the
    same switch (`path[1]`, `path[-2]`) can exchange the middle of their paths without any
    link's load changing (their host links stay theirs). Pairwise exchanges are made while
    they lower the sum over connections of (flows per path)^2, and only where both new paths
    have a probed port (`seen`: (src node, dst node, path) -> ports); the new path takes its
    lowest probed port (`distinct_sports` then gives each flow its own). At most `max_rounds`
    pairs are looked at in all (a large job is spread partly). Pure; deterministic."""
    out = dict(assignments)
    groups: dict[tuple[str, str, float], list[FlowKey]] = defaultdict(list)
    for k, a in sorted(assignments.items()):
        if len(a.path) > 3:  # a path through the fabric (not within one switch)
            groups[(a.path[1], a.path[-2], round(demand.get(k, 0.0), 9))].append(k)

    def conn(k: FlowKey) -> tuple[int, int, int]:
        return (k.src_rank, k.dst_rank, k.channel)

    rounds = 0  # pairs looked at, over all groups (bounds the time on jobs of 16k+ flows)
    for keys in groups.values():
        if len(keys) < 2 or len({out[k].path[1:-1] for k in keys}) < 2:
            continue
        count: dict[tuple[tuple[int, int, int], tuple[str, ...]], int] = defaultdict(int)
        for k in keys:
            count[(conn(k), out[k].path[1:-1])] += 1

        def with_middle(k: FlowKey, mid: tuple[str, ...]) -> Assignment | None:
            a = out[k]
            path = (a.path[0], *mid, a.path[-1])
            ports = seen.get((a.src_node, a.dst_node, path))
            if not ports:
                return None
            return replace(a, path=path, udp_sport=min(ports), links=view.links_of(path))

        improved = True
        while improved and rounds < max_rounds:
            improved = False
            for i, f in enumerate(keys):
                if rounds >= max_rounds:
                    break
                for j in range(i + 1, len(keys)):
                    if rounds >= max_rounds:
                        break
                    g = keys[j]
                    rounds += 1
                    cf, cg = conn(f), conn(g)
                    mf, mg = out[f].path[1:-1], out[g].path[1:-1]
                    if cf == cg or mf == mg:
                        continue
                    # change of sum of squares when f takes mg and g takes mf
                    before = (count[(cf, mf)] ** 2 + count[(cf, mg)] ** 2 + count[(cg, mg)] ** 2 + count[(cg, mf)] ** 2)
                    after = ((count[(cf, mf)] - 1) ** 2 + (count[(cf, mg)] + 1) ** 2 + (count[(cg, mg)] - 1) ** 2
                             + (count[(cg, mf)] + 1) ** 2)
                    if after >= before:
                        continue
                    nf, ng = with_middle(f, mg), with_middle(g, mf)
                    if nf is None or ng is None:
                        continue
                    out[f], out[g] = nf, ng
                    for c, m, d in ((cf, mf, -1), (cf, mg, 1), (cg, mg, -1), (cg, mf, 1)):
                        count[(c, m)] += d
                    improved = True
    return out

