"""The planning instance: flows grouped by (source NIC, destination NIC), each group with its
demand and candidate routes, over indexed link directions with capacities and background load.

Groups are the unit the solvers work on: every flow of a group has the same demand and the
same candidates, so a solution is "how many of the group's flows take each route". Flows are
identified by `(job, FlowKey)` so that one instance may hold several jobs (global
re-optimisation). Pure: building an instance never plans and never does I/O.

Demand (API.md): a flow's demand is its source NIC's capacity (sum of its ports'
`capacity_gbps`) divided by the number of flows that NIC sources over all active jobs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from controller.domain.fabric import Fabric
from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.te.candidates import Candidates, DirectedLink, Nic, Route
from controller.topology.graph import FabricView

FlowId = tuple[str, FlowKey]
ALWAYS_ROUTES = 50_000  # an instance with at most this many routes gets every path of every pair
_SRC_NIC = attrgetter("src_host", "src_nic")
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ActiveJob:
    """A job as the planner sees it: its flows and its current assignments (maybe none)."""

    flows: list[Flow]
    assignments: Mapping[FlowKey, Assignment] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Group:
    src: Nic
    dst: Nic
    flows: tuple[FlowId, ...]
    demand_gbps: float
    routes: tuple[Route, ...]


@dataclass(slots=True)
class Instance:
    """Link directions 0..L-1 (index L is padding with infinite capacity) and groups."""

    links: tuple[DirectedLink, ...]
    capacity_gbps: FloatArray
    background_gbps: FloatArray
    groups: tuple[Group, ...]
    route_links: list[IntArray]
    current: dict[FlowId, Route] = field(default_factory=dict)
    port_base: dict[str, int] = field(default_factory=dict)
    # Every equal-cost path of every up port pair of every group is a route: bounds computed
    # over the routes are proven over the fabric (False: a subset, see `build_instance`, or
    # probed mode's known paths; bounds then come from `bound.structural_bound`).
    complete: bool = True
    _flat: tuple[IntArray, FloatArray] | None = None

    @property
    def n_flows(self) -> int:
        return sum(len(g.flows) for g in self.groups)

    def flat_routes(self) -> tuple[IntArray, FloatArray]:
        """All groups' route-link rows stacked (padded to one width) and each row's demand."""
        if self._flat is None:
            pad = len(self.capacity_gbps) - 1
            width = max(rl.shape[1] for rl in self.route_links)
            flat = np.full((sum(rl.shape[0] for rl in self.route_links), width), pad, dtype=np.int64)
            at = 0
            for rl in self.route_links:
                flat[at:at + rl.shape[0], : rl.shape[1]] = rl
                at += rl.shape[0]
            demand = np.repeat([g.demand_gbps for g in self.groups], [rl.shape[0] for rl in self.route_links])
            self._flat = (flat, demand.astype(np.float64))
        return self._flat

    def group_starts(self) -> IntArray:
        """The first row of each group in `flat_routes`."""
        sizes = np.array([rl.shape[0] for rl in self.route_links], dtype=np.int64)
        starts: IntArray = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        return starts

    def link_index(self) -> dict[DirectedLink, int]:
        return {d: i for i, d in enumerate(self.links)}


def nic_capacity_gbps(fabric: Fabric) -> dict[Nic, float]:
    return {(h.name, n.name): n.capacity_gbps for h in fabric.hosts for n in h.nics}


def demands_gbps(fabric: Fabric, flows_per_nic: Mapping[Nic, int]) -> dict[Nic, float]:
    """Per-flow demand of each NIC that sources flows (API.md's definition)."""
    caps = nic_capacity_gbps(fabric)
    return {nic: caps[nic] / n for nic, n in flows_per_nic.items() if n > 0}


def count_by_nic(flows: Iterable[Flow]) -> Counter[Nic]:
    return Counter(map(_SRC_NIC, flows))  # attrgetter: no Python frame per flow (16k+ per re-plan)


def directed_capacity_gbps(fabric: Fabric) -> dict[DirectedLink, float]:
    out: dict[DirectedLink, float] = {}
    for link in fabric.links:
        out[(link.name, "ab")] = link.capacity_gbps
        out[(link.name, "ba")] = link.capacity_gbps
    return out


def build_instance(
    fabric: Fabric,
    candidates: Candidates,
    flows: Mapping[str, list[Flow]],
    demand_gbps: Mapping[Nic, float],
    background_gbps: Mapping[DirectedLink, float] | None = None,
    current: Mapping[FlowId, Route] | None = None,
    port_base: Mapping[str, int] | None = None,
    pinned: Mapping[FlowId, tuple[str, str]] | None = None,
    pinned_routes: Callable[[str, str], tuple[Route, ...]] | None = None,
    max_routes: int | None = None,
    routes_per_flow: int | None = None,
) -> tuple[Instance, list[tuple[FlowId, Nic, Nic]]]:
    """The instance for `flows` (job name → flows); also the flows that have no route at all.

    `pinned`: flows that keep their (source port, destination port) pair; their candidates
    are `pinned_routes` of that pair only (default: all its routes), so a re-plan's moved
    flows keep their NICs' port balance.

    `max_routes` and `routes_per_flow` (model mode): when every path of every port pair of
    every group would make more routes than `max_routes`, or than `routes_per_flow` times the
    flows, each pair gets only some of its paths (`Candidates.path_routes`,
    a window that rotates from group to group so that every path is offered to some flows),
    plus the current route of each flow, with source ports looked up only for the routes
    the planner chooses; the instance is then not `complete`, and its bounds are computed
    over the fabric's paths instead (`bound.structural_bound`). An all-to-all of 128 ranks
    has 16k NIC pairs of 64 routes each."""
    members: dict[tuple[Nic, Nic, tuple[str, ...]], list[FlowId]] = defaultdict(list)
    pins = pinned or {}
    for job in sorted(flows):
        for f in flows[job]:
            fid = (job, f.key)
            members[(f.src, f.dst, pins.get(fid, ()))].append(fid)
    keys = sorted(members)
    per_pair: int | None = None
    if max_routes is not None and not pins and candidates.hashed_by_model:
        combos = total = 0
        view = candidates.view
        leaves: dict[Nic, list[str]] = {}
        for src, dst, _ in keys:
            for nic in (src, dst):
                if nic not in leaves:
                    leaves[nic] = [view.ports[p].switch for p in candidates.up_ports(nic)]
            for a in leaves[src]:
                for b in leaves[dst]:
                    combos += 1
                    total += candidates.leaf_path_count(a, b)
        budget = max_routes
        if routes_per_flow is not None:  # but never fewer than ALWAYS_ROUTES: small instances get every path
            budget = min(budget, max(ALWAYS_ROUTES, routes_per_flow * sum(len(m) for m in members.values())))
        if total > budget:
            per_pair = max(1, budget // max(1, combos))
    now = current or {}
    groups: list[Group] = []
    unroutable: list[tuple[FlowId, Nic, Nic]] = []
    complete = True
    for gi, (src, dst, pin) in enumerate(keys):
        ids = tuple(sorted(members[(src, dst, pin)]))
        if pin:
            routes = (pinned_routes or candidates.port_routes)(pin[0], pin[1])
        elif per_pair is None:
            routes = candidates.nic_routes(src, dst)
            complete &= candidates.nic_complete(src, dst)
        else:
            found: list[Route] = []
            for j, (a, b) in enumerate((a, b) for a in candidates.up_ports(src) for b in candidates.up_ports(dst)):
                some = candidates.path_routes(a, b, per_pair, gi + j)
                if complete and len(some) >= per_pair:  # the window may have left paths out
                    complete = len(some) >= candidates.path_count(a, b)
                found += some
            have = {(r.src_node, r.dst_node, r.path) for r in found}
            for fid in ids:  # the current routes, so that the current plan is a solution
                r = now.get(fid)
                if r is not None and (r.src_node, r.dst_node, r.path) not in have:
                    have.add((r.src_node, r.dst_node, r.path))
                    found.append(r)
            routes = tuple(found)
        if not routes:
            unroutable += [(fid, src, dst) for fid in ids]
            continue
        groups.append(Group(src, dst, ids, demand_gbps[src], routes))
    bg = dict(background_gbps or {})
    caps = directed_capacity_gbps(fabric)
    if per_pair is None:
        used: set[DirectedLink] = set()
        for directed in {r.directed for g in groups for r in g.routes}:
            used.update(directed)
        links = tuple(sorted(used | {d for d, v in bg.items() if v > 0}))
    else:  # a large instance: every link direction of the fabric, without a scan of the routes
        links = tuple(sorted(caps))
    index = {d: i for i, d in enumerate(links)}
    pad = len(links)
    capacity = np.array([caps[d] for d in links] + [np.inf], dtype=np.float64)
    background = np.array([bg.get(d, 0.0) for d in links] + [0.0], dtype=np.float64)
    cores: dict[tuple[str, ...], list[int]] = {}  # a switch path's link directions (routes share them)
    route_links: list[IntArray] = []
    for g in groups:
        width = max(len(r.directed) for r in g.routes)
        table = []
        for r in g.routes:
            core = r.path[1:-1]
            mid = cores.get(core)
            if mid is None:
                mid = cores[core] = [index[d] for d in r.directed[1:-1]]
            row = [index[r.directed[0]], *mid, index[r.directed[-1]]]
            table.append(row + [pad] * (width - len(row)) if len(row) < width else row)
        route_links.append(np.array(table, dtype=np.int64))
    inst = Instance(links, capacity, background, tuple(groups), route_links,
                    dict(now), dict(port_base or {}), complete=complete)
    return inst, unroutable


def components(inst: Instance) -> list[list[int]]:
    """The instance's groups split into sets that share no link direction (group indices,
    ascending; one set when everything is connected). Only flows couple groups: a link's
    background load is fixed. Each set can be optimised on its own and the instance's maximum
    is the largest of theirs. (A NIC's port balance couples groups that share its port links,
    hence the same set; two groups of one NIC whose routes use disjoint ports would be split,
    which weakens only the balance objective, never a bound.)"""
    n = len(inst.groups)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pad = len(inst.capacity_gbps) - 1
    owner: dict[int, int] = {}
    for gi, rl in enumerate(inst.route_links):
        for e in np.unique(rl).tolist():
            if e == pad:
                continue
            other = owner.setdefault(e, gi)
            a, b = root(other), root(gi)
            if a != b:
                parent[max(a, b)] = min(a, b)
    parts: dict[int, list[int]] = defaultdict(list)
    for gi in range(n):
        parts[root(gi)].append(gi)
    return sorted(parts.values())


def subset(inst: Instance, groups: list[int]) -> Instance:
    """The instance restricted to some groups (same link indices, capacities and background)."""
    return Instance(inst.links, inst.capacity_gbps, inst.background_gbps, tuple(inst.groups[g] for g in groups),
                    [inst.route_links[g] for g in groups], inst.current, inst.port_base, inst.complete)


def load_of(routes: Iterable[tuple[Route, float]]) -> dict[DirectedLink, float]:
    """Load per link direction of (route, demand) pairs."""
    out: dict[DirectedLink, float] = defaultdict(float)
    for route, demand in routes:
        for d in route.directed:
            out[d] += demand
    return dict(out)


def to_route(view: FabricView, a: Assignment) -> Route:
    return Route(a.src_node, a.dst_node, a.path, a.udp_sport, a.links, view.directed_links_of(a.path))


def job_demands(fabric: Fabric, jobs: Mapping[str, ActiveJob]) -> dict[Nic, float]:
    """Per-flow demand of each NIC over all the given (active) jobs."""
    return demands_gbps(fabric, count_by_nic(f for j in jobs.values() for f in j.flows))


def background(view: FabricView, jobs: Mapping[str, ActiveJob], skip: set[str],
               demand: Mapping[Nic, float]) -> dict[DirectedLink, float]:
    """Load per link direction of the assigned flows of every job not in `skip`."""
    pairs: list[tuple[Route, float]] = []
    for name, job in jobs.items():
        if name in skip:
            continue
        src = {f.key: f.src for f in job.flows}
        pairs += [(to_route(view, a), demand[src[k]]) for k, a in job.assignments.items() if k in src]
    return load_of(pairs)
