"""A solution of an instance: how many of each group's flows take each route, and the flow-
by-flow assignment it becomes with as few moves as possible from the current plan.

`Status` values say how a solve ended (statuses are values, never exceptions). Loads and
utilizations are computed here, once, for every solver and for the summary. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from controller.te.candidates import Route
from controller.te.instance import FloatArray, FlowId, Instance, IntArray

EPS = 1e-9


class Status(StrEnum):
    OPTIMAL = "optimal"  # max utilization equals the proven lower bound
    FEASIBLE = "feasible"  # a plan, with a gap to the bound
    NO_PATH = "no_path"  # some flow has no candidate route


@dataclass(slots=True)
class Solution:
    counts: list[IntArray]
    max_utilization: float
    lower_bound: float
    solver: str
    status: Status

    @property
    def gap(self) -> float:
        return self.max_utilization / self.lower_bound - 1.0 if self.lower_bound > 0 else 0.0


def path_key(route: Route) -> tuple[str, str, tuple[str, ...]]:
    return (route.src_node, route.dst_node, route.path)


def counts_of_current(inst: Instance) -> list[IntArray]:
    """The counts of the current plan's flows that still match a candidate route."""
    out: list[IntArray] = []
    for g in inst.groups:
        c = np.zeros(len(g.routes), dtype=np.int64)
        where = {path_key(r): i for i, r in enumerate(g.routes)}
        for fid in g.flows:
            cur = inst.current.get(fid)
            if cur is not None and path_key(cur) in where:
                c[where[path_key(cur)]] += 1
        out.append(c)
    return out


def loads_gbps(inst: Instance, counts: list[IntArray]) -> FloatArray:
    """Background plus every group's flows on their routes, per link direction (one bincount)."""
    if not inst.groups:
        return inst.background_gbps.copy()
    flat, demand_per_route = inst.flat_routes()
    per_route = np.concatenate(counts) * demand_per_route
    load: FloatArray = inst.background_gbps + np.bincount(
        flat.ravel(), weights=np.repeat(per_route, flat.shape[1]), minlength=len(inst.capacity_gbps))
    return load


def utilization(inst: Instance, load: FloatArray) -> FloatArray:
    u: FloatArray = load / inst.capacity_gbps
    return u


def used_mask(inst: Instance, counts: list[IntArray]) -> np.ndarray:
    """Which link directions carry at least one of the instance's flows."""
    used = np.zeros(len(inst.capacity_gbps), dtype=bool)
    if inst.groups:
        flat, _ = inst.flat_routes()
        used[flat[np.flatnonzero(np.concatenate(counts))].ravel()] = True
    used[-1] = False
    return used


def max_utilization(inst: Instance, counts: list[IntArray], only_used: bool = True) -> float:
    """Max utilization over the link directions the flows use (all directions if not only_used)."""
    u = utilization(inst, loads_gbps(inst, counts))
    if only_used:
        mask = used_mask(inst, counts)
        return float(u[mask].max()) if mask.any() else 0.0
    return float(u[:-1].max()) if len(u) > 1 else 0.0


def materialize(inst: Instance, counts: list[IntArray]) -> tuple[dict[FlowId, Route], int]:
    """Flow-by-flow routes for the counts, keeping current paths where the counts allow.

    Returns the assignment and the number of flows whose path changed.
    """
    out: dict[FlowId, Route] = {}
    moved = 0
    for g, c in zip(inst.groups, counts, strict=True):
        room = c.copy()
        where = {path_key(r): i for i, r in enumerate(g.routes)}
        free: list[FlowId] = []
        for fid in g.flows:
            cur = inst.current.get(fid)
            i = where.get(path_key(cur)) if cur is not None else None
            if i is not None and room[i] > 0:
                room[i] -= 1
                out[fid] = g.routes[i]
            else:
                free.append(fid)
        r = 0
        for fid in free:
            while room[r] == 0:
                r += 1
            room[r] -= 1
            out[fid] = g.routes[r]
            if fid in inst.current:
                moved += 1
    return out, moved
