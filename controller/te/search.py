"""The combinatorial planner: min-max greedy placement, then local search on the hottest links.

Greedy places flows one at a time on the route whose hottest link stays coolest (ties: lower
utilization sum, then route order), taking a source NIC port with the fewest flows so far
(dual-port balance: a NIC's flows split within one over its up ports; local search unbalances
a NIC only where that lowers the maximum, e.g. when one of its leaves lost uplinks). It moves
single flows off the hottest link directions, with short chains (a move that heats another
link to the current maximum is allowed when that link can be cooled in turn, the Kempe-chain
step of bipartite edge colouring). Each accepted step lowers the maximum or the number of links
at it, so the search ends; it also stops at a deadline or a move budget. Pure, numpy only.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from controller.te.instance import FloatArray, Instance, IntArray

EPS = 1e-9


class SearchState:
    def __init__(self, inst: Instance, counts: list[IntArray] | None = None) -> None:
        self.inst = inst
        self.cap: FloatArray = inst.capacity_gbps
        self.load: FloatArray = inst.background_gbps.copy()
        self.counts = [c.copy() for c in counts] if counts else [np.zeros(len(g.routes), dtype=np.int64) for g in inst.groups]
        ports = sorted({r.src_node for g in inst.groups for r in g.routes})
        self.port_index: dict[str, int] = {p: i for i, p in enumerate(ports)}
        self.port_count = np.array([inst.port_base.get(p, 0) for p in ports] + [0], dtype=np.int64)
        self.route_port = [np.array([self.port_index[r.src_node] for r in g.routes], dtype=np.int64) for g in inst.groups]
        nic_ports: dict[tuple[str, str], set[int]] = defaultdict(set)
        for g, rp in zip(inst.groups, self.route_port, strict=True):
            nic_ports[g.src].update(int(p) for p in rp)
        self.group_ports = [np.array(sorted(nic_ports[g.src]), dtype=np.int64) for g in inst.groups]
        self.inv_cap = [1.0 / self.cap[rl] for rl in inst.route_links]
        self._users: dict[int, list[tuple[int, int]]] | None = None
        self.routable = np.zeros(len(self.cap), dtype=bool)
        if inst.route_links:
            self.routable[np.unique(np.concatenate([rl.ravel() for rl in inst.route_links]))] = True
        self.routable[-1] = False
        self.moves: int = 0
        self.budget: int = 0
        self.deadline: float = 0.0
        if counts and inst.groups:  # the starting plan's load and port counts, all groups at once
            flat, demand = inst.flat_routes()
            per_route = np.concatenate(self.counts)
            if per_route.any():
                self.load += np.bincount(flat.ravel(), weights=np.repeat(per_route * demand, flat.shape[1]),
                                         minlength=len(self.load))
                np.add.at(self.port_count, np.concatenate(self.route_port), per_route)

    @property
    def users(self) -> dict[int, list[tuple[int, int]]]:
        """(group, route) pairs per link direction; built on first use (greedy needs none)."""
        if self._users is None:
            users: dict[int, list[tuple[int, int]]] = defaultdict(list)
            pad = len(self.cap) - 1
            for gi, rl in enumerate(self.inst.route_links):
                for r, row in enumerate(rl.tolist()):
                    for e in row:
                        if e != pad:
                            users[e].append((gi, r))
            self._users = users
        return self._users

    def _shift(self, gi: int, r: int, k: int) -> None:
        self.load[self.inst.route_links[gi][r]] += k * self.inst.groups[gi].demand_gbps
        self.port_count[self.route_port[gi][r]] += k

    def add(self, gi: int, r: int, k: int = 1) -> None:
        self.counts[gi][r] += k
        self._shift(gi, r, k)

    def move(self, gi: int, r_from: int, r_to: int) -> None:
        self.add(gi, r_from, -1)
        self.add(gi, r_to, 1)
        self.moves += 1

    def max_util(self) -> float:
        u = self.load[self.routable] / self.cap[self.routable]
        return float(u.max()) if len(u) else 0.0

    def best_new(self, gi: int) -> int:
        """The route for one more flow of group gi."""
        rl = self.inst.route_links[gi]
        after = (self.load[rl] + self.inst.groups[gi].demand_gbps) * self.inv_cap[gi]
        c1 = after.max(axis=1)
        pc = self.port_count[self.route_port[gi]]
        c1[pc > self.port_count[self.group_ports[gi]].min()] += 1e6
        ties = np.flatnonzero(c1 <= c1.min() + EPS)
        if len(ties) == 1:
            return int(ties[0])
        return int(ties[np.argmin(after[ties].sum(axis=1))])

    def alternatives(self, gi: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hottest utilization after, unbalance penalty, utilization sum) for moving one flow r -> each route.

        A move that unbalances the NIC's ports is allowed only because the caller accepts a move
        when it lowers the maximum: balance gives way to utilization, never the reverse.
        """
        rl = self.inst.route_links[gi]
        d = self.inst.groups[gi].demand_gbps
        shared = (rl[:, :, None] == rl[r][None, None, :]).any(axis=2)
        after = (self.load[rl] + np.where(shared, 0.0, d)) / self.cap[rl]
        c1 = after.max(axis=1)
        c1[r] = np.inf
        pc = self.port_count[self.route_port[gi]]
        here = pc[r]
        balanced = (self.route_port[gi] == self.route_port[gi][r]) | (pc < here)
        return c1, np.where(balanced, 0, 1), after.sum(axis=1)


def greedy(inst: Instance, start: list[IntArray] | None = None) -> SearchState:
    """Place every flow that `start` does not already place."""
    state = SearchState(inst, start)
    order = sorted(range(len(inst.groups)), key=lambda gi: (len(inst.groups[gi].routes), gi))
    for gi in order:
        need = len(inst.groups[gi].flows) - int(state.counts[gi].sum())
        for _ in range(need):
            state.add(gi, state.best_new(gi))
    return state


def _cool(state: SearchState, e: int, m: float, depth: int, banned: set[tuple[int, int]]) -> bool:
    """Lower link direction e below m by moving one flow, chaining up to `depth` more moves."""
    for gi, r in state.users.get(e, ()):
        if state.counts[gi][r] == 0 or (gi, r) in banned:
            continue
        state.budget -= 1
        if state.budget < 0 or time.monotonic() > state.deadline:
            return False
        c1, unbalance, c2 = state.alternatives(gi, r)
        ok = np.flatnonzero(c1 < m - EPS)
        if len(ok):
            best = ok[np.lexsort((ok, np.round(c2[ok], 9), unbalance[ok], np.round(c1[ok], 9)))[0]]
            state.move(gi, r, int(best))
            return True
        if depth == 0:
            continue
        chain = np.flatnonzero(c1 <= m + EPS)
        for alt in chain[np.argsort(unbalance[chain], kind="stable")]:
            state.move(gi, r, int(alt))
            rl = state.inst.route_links[gi][alt]
            hot = [int(x) for x in rl if x < len(state.cap) - 1 and state.load[x] / state.cap[x] >= m - EPS]
            if all(_cool(state, h, m, depth - 1, banned | {(gi, int(alt))}) for h in hot):
                return True
            state.move(gi, int(alt), r)
            state.moves -= 2
    return False


def improve(state: SearchState, deadline: float, max_moves: int | None = None, depth: int = 2,
            target: float = 0.0, evaluations_per_step: int = 2000) -> SearchState:
    """Local search on the hottest links until stuck, out of time or out of move budget.

    Stops at once when the maximum reaches `target` (a proven bound). Each step may evaluate
    at most `evaluations_per_step` flows, which caps the chains' branching.
    A chained step may leave other links at the maximum when a later link in the chain cannot
    be cooled; the caller keeps the best state it has seen, so this never makes a plan worse
    than the max it started from.
    """
    state.deadline = deadline
    while time.monotonic() < deadline and (max_moves is None or state.moves < max_moves):
        m = state.max_util()
        if m <= target + EPS:
            break
        state.budget = evaluations_per_step
        u = state.load / state.cap
        hot = np.flatnonzero(state.routable & (u >= m - EPS))
        if not any(_cool(state, int(e), m, depth, set()) for e in hot[:1]):
            break
        if state.max_util() > m + EPS:
            break
    return state


def toward(state: SearchState, target: list[IntArray], current: list[IntArray], budget: int,
           deadline: float) -> SearchState:
    """Move `state` toward the `target` counts one group at a time, within `budget` moves away
    from `current` (flows that leave their current route), and return the best state passed
    (lowest max utilization, then fewest link directions at it, then fewest moves). Each step
    switches the group that lowers a smooth stand-in for the maximum (the sum of utilizations
    to the 8th power) the most per move, or raises it the least: the way may pass through
    worse states (all the switches together give the target). For a re-optimisation whose
    local search is stuck while a plan from scratch is better: the change usually needs
    several groups at once, which single-flow moves cannot do."""
    inst, cap, routable = state.inst, state.cap, state.routable
    pending = [gi for gi, (now, t) in enumerate(zip(state.counts, target, strict=True)) if not np.array_equal(now, t)]

    def moves_of(gi: int, counts: IntArray) -> int:
        return int(np.maximum(current[gi] - counts, 0).sum())

    def score(load: FloatArray) -> tuple[float, int, float]:
        u = load[routable] / cap[routable]
        top = float(u.max()) if len(u) else 0.0
        return top, int((u >= top - EPS).sum()), float((u ** 8).sum())

    used = sum(moves_of(gi, c) for gi, c in enumerate(state.counts))
    here = score(state.load)
    best = (here[0], here[1], used, [c.copy() for c in state.counts])
    while pending and time.monotonic() < deadline:
        pick: tuple[float, int, tuple[float, int, float], FloatArray] | None = None
        for gi in pending:
            extra = moves_of(gi, target[gi]) - moves_of(gi, state.counts[gi])
            if used + extra > budget:
                continue
            rl, d = inst.route_links[gi], inst.groups[gi].demand_gbps
            delta = (target[gi] - state.counts[gi]).astype(np.float64) * d
            load = state.load.copy()
            np.add.at(load, rl, np.repeat(delta[:, None], rl.shape[1], axis=1))
            after = score(load)
            gain = (here[2] - after[2]) / max(1, extra)
            if pick is None or gain > pick[0]:
                pick = (gain, gi, after, load)
        if pick is None:
            break
        _, gi, here, load = pick
        used += moves_of(gi, target[gi]) - moves_of(gi, state.counts[gi])
        state.counts[gi] = target[gi].copy()
        state.load = load
        pending.remove(gi)
        if (here[0], here[1], used) < best[:3]:
            best = (here[0], here[1], used, [c.copy() for c in state.counts])
    out = SearchState(inst, best[3])
    out.moves = best[2]
    return out
