"""Weights inside NCCL connections by a linear program, paths fixed. Pure: values in, values out.

Used where a connection's sockets must stay open (a TCP socket keeps its source port, so its
path, for life) and only the share of bytes each socket carries can change: after a link
change (`te.failover.reweight`) and when a link direction is degraded (`te.rebalance`, a link
delivering far less than its capacity: its measured rate is its capacity in the program).

The program: a variable per flow (its weight, 0..1), the weights of each connection summing to
what they summed to before (the connection's share of its bytes); per link direction the load
`background + sum(coef * weight) <= t * capacity`; minimise `t`, the highest utilization. Then,
at that utilization (within `eps`), as close to equal weights inside each connection as it can
(the fewest surprises: a weight moves only as far as the bottleneck needs). Directions whose
load no weight can change are left out of the program (`_fixed`) and counted in the
utilization reported. Optional bounds: `upper`, a flow's weight may not exceed it (the
rebalancer's per-flow hold-down: a weight it lowered does not rise again before the hold-down
ends); `limit`, a direction's load may not exceed it (a direction whose load it took off takes
none back meanwhile). The current weights must satisfy both (they then always can).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from controller.te.candidates import DirectedLink

C = TypeVar("C", bound=Hashable)  # a connection
K = TypeVar("K", bound=Hashable)  # a flow


def _fixed(d: DirectedLink, ts: Sequence[tuple[float, K]], conns: Mapping[C, Sequence[K]],
           conn_of: Mapping[K, C]) -> bool:
    """Whether no choice of weights changes the direction's load: every connection with a flow
    on it has all its flows on it, each with the same coefficient (a host's own link, say).
    Such a direction is left out of the program: when it is the most utilized (a host link
    reported congested on a slowed ring), minimising the highest utilization would stop at
    its fixed level and leave every other direction free up to it (seen on the testbed: the
    weights off a throttled spine link went back toward even)."""
    on: dict[K, float] = {}
    for x, k in ts:
        on[k] = on.get(k, 0.0) + x
    for c in {conn_of[k] for k in on if k in conn_of}:
        coeffs = {round(on.get(k, -1.0), 12) for k in conns[c]}
        if len(coeffs) != 1 or -1.0 in coeffs:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Balanced(Generic[K]):
    weights: dict[K, float]  # per flow, each connection's summing exactly to its share
    max_utilization: float  # over the directions with a capacity, after


def balance(conns: Mapping[C, Sequence[K]], share: Mapping[C, float],
            terms: Mapping[DirectedLink, Sequence[tuple[float, K]]], background: Mapping[DirectedLink, float],
            capacity: Mapping[DirectedLink, float], eps: float = 1e-9,
            upper: Mapping[K, float] | None = None,
            limit: Mapping[DirectedLink, float] | None = None) -> Balanced[K] | None:
    """`conns`: connection -> its flows; `share`: connection -> what its weights sum to;
    `terms`: per link direction, (Gb/s per unit weight, flow) of every flow crossing it;
    `background`: other load per direction (Gb/s); `capacity`: per direction (Gb/s; a direction
    without one is not constrained); `upper`: per flow, the most its weight may be; `limit`: per
    direction, the most its load (background included) may be. None when the solver finds no
    optimum."""
    upper = upper or {}
    limit = limit or {}
    from ortools.linear_solver import pywraplp  # the solver, only when there is work

    solver = pywraplp.Solver.CreateSolver("GLOP")
    keys = [k for c in conns for k in conns[c]]
    w = {k: solver.NumVar(0.0, min(1.0, upper.get(k, 1.0)), f"w{i}") for i, k in enumerate(keys)}
    t = solver.NumVar(0.0, solver.infinity(), "t")
    for c, ks in conns.items():
        solver.Add(sum(w[k] for k in ks) == share[c])
    conn_of = {k: c for c in conns for k in conns[c]}
    for d, ts in terms.items():
        cap = capacity.get(d, 0.0)
        if cap <= 0 or _fixed(d, ts, conns, conn_of):
            continue
        solver.Add(background.get(d, 0.0) + sum(x * w[k] for x, k in ts if k in w) <= t * cap)
    for d, most in limit.items():
        ts = terms.get(d, ())
        if any(k in w for _, k in ts) and not _fixed(d, ts, conns, conn_of):
            solver.Add(background.get(d, 0.0) + sum(x * w[k] for x, k in ts if k in w) <= most * (1 + eps) + eps)
    solver.Minimize(t)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    best = t.solution_value()
    solver.Add(t <= best * (1 + eps) + eps)
    dev = []
    for c, ks in conns.items():
        even = share[c] / len(ks)
        for k in ks:
            e = solver.NumVar(0.0, solver.infinity(), "")
            solver.Add(e >= w[k] - even)
            solver.Add(e >= even - w[k])
            dev.append(e)
    solver.Minimize(sum(dev))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    out: dict[K, float] = {}
    for c, ks in conns.items():
        vals = [max(0.0, w[k].solution_value()) for k in ks]
        s = sum(vals)
        vals = [v * share[c] / s for v in vals] if s > 0 else [share[c] / len(ks)] * len(ks)
        vals = [min(v, upper.get(k, 1.0)) for v, k in zip(vals, ks, strict=True)]
        # The validator wants each connection to sum exactly: the rounding goes to the flow
        # with the most room under its bound (never above a bound).
        room = max(range(len(ks)), key=lambda i: (upper.get(ks[i], 1.0) - vals[i], -i))
        vals[room] = share[c] - sum(v for i, v in enumerate(vals) if i != room)
        for k, v in zip(ks, vals, strict=True):
            out[k] = min(1.0, max(0.0, round(v, 9)))
    util = 0.0  # every direction, those no weight can change included (what the flows will see)
    for d, ts in terms.items():
        cap = capacity.get(d, 0.0)
        if cap > 0:
            util = max(util, (background.get(d, 0.0) + sum(x * out[k] for x, k in ts if k in out)) / cap)
    return Balanced(out, util)
