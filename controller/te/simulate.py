"""Flow-level max-min fair rates, and the bus-bandwidth fraction they predict.

Progressive filling: every unfrozen flow's rate grows at the same pace until a link direction
is full (its flows freeze) or a flow reaches its demand (it needs no more: the demand is its
fair share of its NIC, so ideal is every flow at its demand). Flows that share a route and a
demand are one class with a multiplicity, so 64k flows cost what their classes cost.

A connection's weights are equal, so it finishes with its slowest flow, and a ring (or any
collective) is paced by its slowest connection: the predicted bus bandwidth fraction is the
minimum over the job's flows of rate / demand. Pure, numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.te.instance import FloatArray, IntArray

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class FlowClasses:
    """`links[c]`: padded link-direction indices of class c (pad index = len(capacity) - 1)."""

    links: IntArray
    count: IntArray
    demand_gbps: FloatArray


def max_min_rates(classes: FlowClasses, capacity_gbps: FloatArray, wanted: IntArray | None = None) -> FloatArray:
    """Max-min fair per-flow rate of each class, capped at its demand.

    Each round works on the classes still growing only (frozen ones are dropped from the
    arrays as they freeze): the same sums in the same order as over every class with the
    frozen ones weighted 0, so the same rates, at a cost that shrinks as flows freeze (a
    summary runs this over every active job's flows: issue 18).

    `wanted`: only these classes' rates are asked for. The filling stops once every one of
    them is frozen (a frozen class's rate never changes afterwards, so theirs are exactly the
    full run's); the other classes' rates are then left where the filling stopped."""
    n_links = len(capacity_gbps)
    pad = n_links - 1
    rate = np.zeros(len(classes.count))
    if not len(rate):
        return rate
    finite = np.isfinite(capacity_gbps)
    remaining = np.where(finite, capacity_gbps, np.inf).astype(np.float64)
    tolerance = EPS * np.where(finite, capacity_gbps, 1.0)
    width = classes.links.shape[1]
    idx = np.flatnonzero(classes.count > 0)
    links = classes.links[idx]
    weights = np.repeat(classes.count[idx], width).astype(np.float64)
    demand = classes.demand_gbps[idx]
    grown = np.zeros(len(idx))
    watch = None
    if wanted is not None:
        watch = np.zeros(len(rate), dtype=bool)
        watch[wanted] = True
        watch = watch[idx]
    for _ in range(10 * len(rate) + 10):
        if not len(idx) or (watch is not None and not watch.any()):
            break
        n_active = np.bincount(links.ravel(), weights=weights, minlength=n_links)
        n_active[pad] = 0
        with np.errstate(divide="ignore", invalid="ignore"):
            per_link = np.where(n_active > 0, remaining / n_active, np.inf)
        step = min(float(per_link.min()), float((demand - grown).min()))
        step = max(step, 0.0)
        grown += step
        remaining -= step * n_active
        full = (n_active > 0) & (remaining <= tolerance)
        full[pad] = False
        keep = ~(full[links].any(axis=1) | (grown >= demand * (1 - EPS)))
        if not keep.all():
            rate[idx[~keep]] = grown[~keep]
            idx, links, demand, grown = idx[keep], links[keep], demand[keep], grown[keep]
            weights = weights.reshape(-1, width)[keep].ravel()
            if watch is not None:
                watch = watch[keep]
    rate[idx] = grown
    return rate


def max_min_rates_reference(classes: FlowClasses, capacity_gbps: FloatArray) -> FloatArray:
    """`max_min_rates` over every class each round (the definition; tests compare the two)."""
    n_links = len(capacity_gbps)
    pad = n_links - 1
    rate = np.zeros(len(classes.count))
    if not len(rate):
        return rate
    remaining = np.where(np.isfinite(capacity_gbps), capacity_gbps, np.inf).astype(np.float64)
    active = classes.count > 0
    flat = classes.links.ravel()
    width = classes.links.shape[1]
    for _ in range(10 * len(rate) + 10):
        if not active.any():
            break
        weights = np.repeat(np.where(active, classes.count, 0), width).astype(np.float64)
        n_active = np.bincount(flat, weights=weights, minlength=n_links)
        n_active[pad] = 0
        with np.errstate(divide="ignore", invalid="ignore"):
            per_link = np.where(n_active > 0, remaining / n_active, np.inf)
        step = min(float(per_link.min()), float((classes.demand_gbps - rate)[active].min()))
        step = max(step, 0.0)
        rate[active] += step
        remaining -= step * n_active
        full = (n_active > 0) & (remaining <= EPS * np.where(np.isfinite(capacity_gbps), capacity_gbps, 1.0))
        full[pad] = False
        touches_full = full[classes.links].any(axis=1)
        done = rate >= classes.demand_gbps * (1 - EPS)
        active &= ~(touches_full | done)
    return rate


def member_fraction(classes: FlowClasses, capacity_gbps: FloatArray, members: IntArray) -> float:
    """`busbw_fraction` of `members` under the max-min fair rates, the filling stopped once
    every member is frozen (the same figure as over the full run: `max_min_rates`)."""
    return busbw_fraction(classes, max_min_rates(classes, capacity_gbps, members), members)


def busbw_fraction(classes: FlowClasses, rates: FloatArray, members: IntArray) -> float:
    """min rate / demand over the classes in `members` (the job's own flows)."""
    if not len(members):
        return 1.0
    return float(np.min(rates[members] / classes.demand_gbps[members]))
