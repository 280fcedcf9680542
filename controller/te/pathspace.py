"""Every route an instance's groups could take, factorized instead of listed.

A route is an up port of the source NIC (its link up to its leaf: the head), an up port of
the destination NIC (the link down from its leaf: the tail) and an equal-cost switch path
between the two leaves. Listing every combination costs routes x links (an all-to-all of 128
ranks: 16k NIC pairs x 64 routes); here each group has its port pairs (head, tail, leaf
pair) and each leaf pair its switch paths, once. What needs every route of the fabric, not
an instance's subset of them, works on this: the proven bound of a large or probed-mode
instance (`bound.structural_bound`) and ECMP's draws (`ecmp.FabricSampler`).

Link directions are indexed as the instance indexes them, the fabric's other directions
after them. Pure.
"""

from __future__ import annotations

import numpy as np

from controller.te.candidates import Candidates
from controller.te.instance import FloatArray, Instance, IntArray

DirectedLink = tuple[str, str]


class PathSpace:
    def __init__(self, cands: Candidates, inst: Instance) -> None:
        view = cands.view
        self.links: list[DirectedLink] = list(inst.links)
        index = {d: i for i, d in enumerate(self.links)}

        def at(d: DirectedLink) -> int:
            i = index.get(d)
            if i is None:
                i = index[d] = len(self.links)
                self.links.append(d)
            return i

        up: dict[str, tuple[int, str]] = {}  # port -> (its head link direction, its leaf)
        down: dict[str, int] = {}  # port -> its tail link direction
        for nic in {g.src for g in inst.groups} | {g.dst for g in inst.groups}:
            for p in cands.up_ports(nic):
                leaf = view.ports[p].switch
                link = view.link_between(p, leaf)
                up[p] = (at((link.name, "ab" if link.a == p else "ba")), leaf)
                down[p] = at((link.name, "ba" if link.a == p else "ab"))
        pairs: dict[tuple[str, str], int] = {}
        group, head, tail, pair = [], [], [], []
        for gi, g in enumerate(inst.groups):
            dsts = [(down[b], up[b][1]) for b in cands.up_ports(g.dst)]
            for a in cands.up_ports(g.src):
                h, s = up[a]
                for t, d in dsts:
                    group.append(gi)
                    head.append(h)
                    tail.append(t)
                    pair.append(pairs.setdefault((s, d), len(pairs)))
        self.group, self.head, self.tail, self.pair = (np.array(x, dtype=np.int64) for x in (group, head, tail, pair))
        self.leaf_pairs = list(pairs)
        # per leaf pair: its switch paths as rows of link directions, and ECMP's probability of each
        self.paths: list[list[list[int]]] = []
        self.probabilities: list[list[float]] = []
        for s, d in self.leaf_pairs:
            rows: list[list[int]] = []
            probs: list[float] = []
            for sw, _, hops in cands.switch_paths(s, d):
                rows.append([at(x) for x in hops])
                prob = 1.0
                for node in sw[:-1]:
                    prob /= max(1, len(view.next_hops(node, d)))
                probs.append(prob)
            self.paths.append(rows)
            self.probabilities.append(probs)
        self.n_groups = len(inst.groups)
        caps = np.ones(len(self.links) + 1)
        caps[: len(inst.links)] = inst.capacity_gbps[:-1]
        for i in range(len(inst.links), len(self.links)):
            caps[i] = view.links[self.links[i][0]].capacity_gbps
        caps[-1] = np.inf
        self.capacity: FloatArray = caps
        self.background: FloatArray = np.zeros(len(self.links) + 1)
        self.background[: len(inst.links)] = inst.background_gbps[:-1]

    @property
    def pad(self) -> int:
        """The index that pads rows (infinite capacity)."""
        return len(self.links)

    def cheapest(self, per_link: FloatArray) -> FloatArray:
        """Each group's cheapest route under link costs `per_link` (indexed as `links`; inf if
        the group has no route)."""
        pair_min = np.full(len(self.leaf_pairs), np.inf)
        for j, rows in enumerate(self.paths):
            if rows:
                pair_min[j] = min(float(per_link[r].sum()) if r else 0.0 for r in rows)
        cost = per_link[self.head] + per_link[self.tail] + pair_min[self.pair]
        out: FloatArray = np.full(self.n_groups, np.inf)
        np.minimum.at(out, self.group, cost)
        return out

    def core_rows(self) -> tuple[IntArray, IntArray, IntArray, FloatArray]:
        """Every leaf pair's paths stacked: (rows padded with `pad`, first row of each pair,
        rows per pair, cumulative ECMP probability of each row within its pair)."""
        width = max((len(r) for rows in self.paths for r in rows), default=0)
        total = sum(len(rows) for rows in self.paths)
        out = np.full((max(1, total), max(1, width)), self.pad, dtype=np.int64)
        first = np.zeros(len(self.paths), dtype=np.int64)
        count = np.zeros(len(self.paths), dtype=np.int64)
        cum = np.ones(max(1, total))
        at = 0
        for j, (rows, probs) in enumerate(zip(self.paths, self.probabilities, strict=True)):
            first[j], count[j] = at, len(rows)
            for r in rows:
                out[at, : len(r)] = r
                at += 1
            if rows:
                c = np.cumsum(np.array(probs) / sum(probs))
                c[-1] = 1.0
                cum[first[j]: first[j] + len(rows)] = c
        return out, first, count, cum
