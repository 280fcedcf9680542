"""What plain ECMP and bonding would do with the same flows: random NIC ports, random paths.

A flow under ECMP picks each of its NIC ports uniformly (the bond hash) and, at each switch,
one of the equal-cost next hops uniformly (a random RoCEv2 source port through the hash), so a
route's probability is 1/(ports pairs) times the product of 1/|next hops| along its path.
`draws` samples whole assignments with a seeded generator; `expected_max_utilization` is the
mean over draws of the max utilization over the link directions the flows use. Pure.
"""

from __future__ import annotations

import numpy as np

from controller.te.candidates import Candidates
from controller.te.instance import FloatArray, Instance, IntArray
from controller.te.pathspace import PathSpace
from controller.topology.graph import FabricView


def route_probabilities(view: FabricView, inst: Instance) -> list[FloatArray]:
    out: list[FloatArray] = []
    per_switch_path: dict[tuple[str, ...], float] = {}
    for g in inst.groups:
        pairs = {(r.src_node, r.dst_node) for r in g.routes}
        p = np.empty(len(g.routes))
        for i, r in enumerate(g.routes):
            core = r.path[1:-1]
            prob = per_switch_path.get(core)
            if prob is None:
                prob = 1.0
                for node in core[:-1]:
                    prob /= max(1, len(view.next_hops(node, core[-1])))
                per_switch_path[core] = prob
            p[i] = prob / len(pairs)
        out.append(p / p.sum())
    return out


class EcmpSampler:
    """Vectorised sampling of ECMP assignments of an instance's flows."""

    def __init__(self, view: FabricView, inst: Instance, seed: int = 0) -> None:
        self.inst = inst
        self.rng = np.random.default_rng(seed)
        probs = route_probabilities(view, inst)
        sizes = np.array([len(p) for p in probs], dtype=np.int64)
        self.offset = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        cum = [np.cumsum(p) for p in probs]
        for c in cum:
            c[-1] = 1.0
        self.cum = np.concatenate([gi + c for gi, c in enumerate(cum)]) if cum else np.zeros(0)
        pad = len(inst.capacity_gbps) - 1
        width = max((rl.shape[1] for rl in inst.route_links), default=1)
        self.route_links = np.full((int(sizes.sum()), width), pad, dtype=np.int64)
        for gi, rl in enumerate(inst.route_links):
            o = self.offset[gi]
            self.route_links[o:o + rl.shape[0], : rl.shape[1]] = rl
        self.flow_group = np.repeat(np.arange(len(inst.groups)), [len(g.flows) for g in inst.groups])
        self.flow_demand = np.array([g.demand_gbps for g in inst.groups])[self.flow_group]

    def draw(self) -> IntArray:
        """One ECMP draw: the flat route index of every flow."""
        u = self.rng.random(len(self.flow_group))
        idx = np.searchsorted(self.cum, self.flow_group + u, side="right")
        limit = self.offset + np.array([len(g.routes) for g in self.inst.groups]) - 1
        chosen: IntArray = np.minimum(idx, limit[self.flow_group])
        return chosen

    def max_utilization(self, chosen: IntArray) -> float:
        links = self.route_links[chosen]
        n = len(self.inst.capacity_gbps)
        load = self.inst.background_gbps + np.bincount(
            links.ravel(), weights=np.repeat(self.flow_demand, links.shape[1]), minlength=n)
        used = np.zeros(n, dtype=bool)
        used[links.ravel()] = True
        used[-1] = False
        u = load / self.inst.capacity_gbps
        return float(u[used].max()) if used.any() else 0.0

    def counts(self, chosen: IntArray) -> list[IntArray]:
        flat = np.bincount(chosen, minlength=len(self.route_links))
        return [flat[o:o + len(g.routes)].astype(np.int64) for o, g in zip(self.offset, self.inst.groups, strict=True)]


def expected_max_utilization(view: FabricView, inst: Instance, draws: int = 16, seed: int = 0) -> float:
    if not inst.groups:
        return 0.0
    sampler = EcmpSampler(view, inst, seed)
    return float(np.mean([sampler.max_utilization(sampler.draw()) for _ in range(draws)]))


class FabricSampler:
    """ECMP draws over every equal-cost path of the fabric, for instances whose routes are not
    all of them (`Instance.complete` False): each flow picks its NIC ports uniformly, then a
    switch path with the product of 1 / |next hops| along it (`pathspace.PathSpace`). A draw
    is each flow's row of link directions, indexed as `links`."""

    def __init__(self, cands: Candidates, inst: Instance, seed: int = 0, space: PathSpace | None = None) -> None:
        space = space or PathSpace(cands, inst)
        self.rng = np.random.default_rng(seed)
        self.links = space.links
        self.capacity, self.background, self.pad = space.capacity, space.background, space.pad
        self.core, self.first, self.count, self.cum = space.core_rows()
        # per flow: the range of its group's port pairs in the space's arrays
        starts = np.searchsorted(space.group, np.arange(len(inst.groups)), side="left")
        ends = np.searchsorted(space.group, np.arange(len(inst.groups)), side="right")
        sizes = np.array([len(g.flows) for g in inst.groups], dtype=np.int64)
        self.flow_start = np.repeat(starts, sizes)
        self.flow_combos = np.repeat(ends - starts, sizes)
        self.head, self.tail, self.pair = space.head, space.tail, space.pair
        self.demand = np.repeat([g.demand_gbps for g in inst.groups], sizes).astype(np.float64)

    def draw(self) -> IntArray:
        """One draw: per flow, its row of link directions (padded with `pad`)."""
        m = len(self.demand)
        combo = self.flow_start + np.minimum((self.rng.random(m) * self.flow_combos).astype(np.int64),
                                             self.flow_combos - 1)
        pair = self.pair[combo]
        start, count = self.first[pair], self.count[pair]
        u = self.rng.random(m)
        path = start.copy()  # the first path of the pair whose cumulative probability reaches u
        for k in range(int(count.max()) - 1 if m else 0):
            more = (k + 1 < count) & (self.cum[np.minimum(start + k, len(self.cum) - 1)] < u)
            path = np.where(more, start + k + 1, path)
        out: IntArray = np.concatenate([self.head[combo][:, None], self.core[path], self.tail[combo][:, None]], axis=1)
        return out

    def max_utilization(self, rows: IntArray) -> float:
        load = self.background + np.bincount(rows.ravel(), weights=np.repeat(self.demand, rows.shape[1]),
                                             minlength=len(self.capacity))
        used = np.zeros(len(self.capacity), dtype=bool)
        used[rows.ravel()] = True
        used[-1] = False
        u = load / self.capacity
        return float(u[used].max()) if used.any() else 0.0
