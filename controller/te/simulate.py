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

from collections.abc import Mapping
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

    Event by event (issue 18: a summary runs this over every active job's flows, so a round
    must not cost a pass over every class): every class still growing has grown by the same
    `level` (they all start at 0 and take the same steps), so a round needs only the link
    directions' remaining capacity and growing flow counts (kept up to date by subtracting
    the classes that freeze: integer counts, so exactly the sums a fresh count gives) and the
    smallest demand still growing (classes sorted by demand). The classes crossing a link
    direction that fills are found through a link -> classes index. The same steps in the
    same order as the definition (`max_min_rates_reference`), so the same rates bit for bit
    (tests), at a cost per round of the links plus the classes that freeze in it.

    `wanted`: only these classes' rates are asked for. The filling stops once every one of
    them is frozen (a frozen class's rate never changes afterwards, so theirs are exactly the
    full run's); the other classes' rates are then left where the filling stopped."""
    n_links = len(capacity_gbps)
    pad = n_links - 1
    rate = np.zeros(len(classes.count))
    idx = np.flatnonzero(classes.count > 0)
    if not len(idx):
        return rate
    finite = np.isfinite(capacity_gbps)
    remaining = np.where(finite, capacity_gbps, np.inf).astype(np.float64)
    tolerance = EPS * np.where(finite, capacity_gbps, 1.0)
    width = classes.links.shape[1]
    links = classes.links[idx]
    weights = classes.count[idx].astype(np.float64)
    demand = classes.demand_gbps[idx]
    m = len(idx)
    n_active = np.bincount(links.ravel(), weights=np.repeat(weights, width), minlength=n_links)
    n_active[pad] = 0
    flat = links.ravel()
    real = flat != pad
    keys = flat[real]
    # (a stable sort of 16-bit keys is a radix sort in numpy: linear, the same order)
    order = np.argsort(keys.astype(np.uint16) if n_links <= 1 << 16 else keys, kind="stable")
    by_link = np.repeat(np.arange(m), width)[real][order]  # classes, grouped by the link they cross
    starts = np.searchsorted(flat[real][order], np.arange(n_links + 1))
    by_demand = np.argsort(demand, kind="stable")
    sated = demand[by_demand] * (1 - EPS)  # (ascending, as demand * a positive constant is)
    active = np.ones(m, dtype=bool)
    left = m
    watch: np.ndarray | None = None
    watching = 0
    if wanted is not None:
        where = np.full(len(rate), -1, dtype=np.int64)
        where[idx] = np.arange(m)
        watch = np.zeros(m, dtype=bool)
        watch[where[wanted][where[wanted] >= 0]] = True
        watching = int(watch.sum())
    level = 0.0
    low = 0  # by_demand[:low] are frozen
    for _ in range(10 * len(rate) + 10):
        if not left or (watch is not None and not watching):
            break
        while not active[by_demand[low]]:
            low += 1
        with np.errstate(divide="ignore", invalid="ignore"):
            per_link = np.where(n_active > 0, remaining / n_active, np.inf)
        step = min(float(per_link.min()), float(demand[by_demand[low]] - level))
        step = max(step, 0.0)
        level += step
        remaining -= step * n_active
        full = (n_active > 0) & (remaining <= tolerance)
        full[pad] = False
        # the classes that freeze: those crossing a link direction that filled, and those
        # that reached their demand (an index array, not a mask over every class: a round
        # costs the links plus the classes it touches)
        parts = [by_link[starts[link]:starts[link + 1]] for link in np.flatnonzero(full).tolist()]
        top = int(np.searchsorted(sated, level, side="right"))  # demand * (1 - EPS) <= level
        if top > low:
            parts.append(by_demand[low:top])
        if not parts:
            continue
        done = np.concatenate(parts) if len(parts) > 1 else parts[0]
        done = done[active[done]]
        if not len(done):
            continue
        # ascending, as a mask's indices (the same sums below); one link's classes, or one
        # demand range, hold no class twice
        done = np.unique(done) if len(parts) > 1 else np.sort(done)
        rate[idx[done]] = level
        active[done] = False
        left -= len(done)
        if watch is not None:
            watching -= int(watch[done].sum())
        n_active -= np.bincount(links[done].ravel(), weights=np.repeat(weights[done], width), minlength=n_links)
        n_active[pad] = 0
    rate[idx[active]] = level
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


@dataclass(frozen=True, slots=True)
class Prepared:
    """A fixed set of classes (every job's flows as planned) indexed once, for many runs that
    each take some of its flows out and add a few classes of their own (`member_fraction_with`:
    one job's flows placed another way). `count` as int64; the rest as `max_min_rates` builds
    it per run."""

    classes: FlowClasses
    n_active: FloatArray  # flows per link direction, every class counted
    by_link: IntArray
    starts: IntArray
    by_demand: IntArray
    sated: FloatArray


def prepare(classes: FlowClasses, capacity_gbps: FloatArray) -> Prepared:
    n_links = len(capacity_gbps)
    pad = n_links - 1
    width = classes.links.shape[1]
    m = len(classes.count)
    n_active = np.asarray(np.bincount(classes.links.ravel(), weights=np.repeat(classes.count.astype(np.float64), width),
                                      minlength=n_links), dtype=np.float64)
    n_active[pad] = 0
    flat = classes.links.ravel()
    real = flat != pad
    keys = flat[real]
    order = np.argsort(keys.astype(np.uint16) if n_links <= 1 << 16 else keys, kind="stable")
    by_link = np.repeat(np.arange(m), width)[real][order]
    starts = np.searchsorted(keys[order], np.arange(n_links + 1))
    by_demand = np.argsort(classes.demand_gbps, kind="stable")
    return Prepared(classes, n_active, by_link, starts, by_demand, classes.demand_gbps[by_demand] * (1 - EPS))


def member_fraction_with(base: Prepared, minus: Mapping[int, int], extra: FlowClasses,
                         capacity_gbps: FloatArray) -> float:
    """`member_fraction` over `base`'s classes with `minus` flows taken out (class index ->
    flows) and the `extra` classes added, the extra classes the members: the same steps as
    `max_min_rates` over those classes in one `FlowClasses` (base's, then extra's; so the same
    fraction bit for bit: tests), without rebuilding the base's index for each run."""
    n_links = len(capacity_gbps)
    pad = n_links - 1
    b = base.classes
    wb = b.links.shape[1]
    count_b = b.count.copy()
    taken = np.array(sorted(minus), dtype=np.int64)
    n_active = base.n_active.copy()
    if len(taken):
        got = np.array([minus[i] for i in taken.tolist()], dtype=np.int64)
        count_b[taken] -= got
        n_active -= np.bincount(b.links[taken].ravel(), weights=np.repeat(got.astype(np.float64), wb),
                                minlength=n_links)
        n_active[pad] = 0
    active_b = count_b > 0
    weights_b = count_b.astype(np.float64)
    we = extra.links.shape[1]
    k = len(extra.count)
    active_e = extra.count > 0
    weights_e = extra.count.astype(np.float64)
    n_active += np.bincount(extra.links.ravel(), weights=np.repeat(np.where(active_e, weights_e, 0.0), we),
                            minlength=n_links)
    n_active[pad] = 0
    rate_e = np.zeros(k)
    if not active_e.any():
        return busbw_fraction(extra, rate_e, np.arange(k, dtype=np.int64))
    finite = np.isfinite(capacity_gbps)
    remaining = np.where(finite, capacity_gbps, np.inf).astype(np.float64)
    tolerance = EPS * np.where(finite, capacity_gbps, 1.0)
    by_demand_e = np.argsort(extra.demand_gbps, kind="stable")
    sated_e = extra.demand_gbps * (1 - EPS)
    left = int(active_b.sum()) + int(active_e.sum())
    watching = int(active_e.sum())
    level = 0.0
    low_b = low_e = 0
    m = len(count_b)
    for _ in range(10 * (m + k) + 10):
        if not left or not watching:
            break
        while low_b < m and not active_b[base.by_demand[low_b]]:
            low_b += 1
        while low_e < k and not active_e[by_demand_e[low_e]]:
            low_e += 1
        lowest = min(float(b.demand_gbps[base.by_demand[low_b]]) if low_b < m else np.inf,
                     float(extra.demand_gbps[by_demand_e[low_e]]) if low_e < k else np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            per_link = np.where(n_active > 0, remaining / n_active, np.inf)
        step = min(float(per_link.min()), float(lowest - level))
        step = max(step, 0.0)
        level += step
        remaining -= step * n_active
        full = (n_active > 0) & (remaining <= tolerance)
        full[pad] = False
        parts = [base.by_link[base.starts[link]:base.starts[link + 1]] for link in np.flatnonzero(full).tolist()]
        top = int(np.searchsorted(base.sated, level, side="right"))
        if top > low_b:
            parts.append(base.by_demand[low_b:top])
        if parts:
            done = np.concatenate(parts) if len(parts) > 1 else parts[0]
            done = done[active_b[done]]
            if len(done):
                done = np.unique(done) if len(parts) > 1 else np.sort(done)
                active_b[done] = False
                left -= len(done)
                n_active -= np.bincount(b.links[done].ravel(), weights=np.repeat(weights_b[done], wb),
                                        minlength=n_links)
                n_active[pad] = 0
        done_e = np.flatnonzero(active_e & (full[extra.links].any(axis=1) | (sated_e <= level)))
        if len(done_e):
            rate_e[done_e] = level
            active_e[done_e] = False
            left -= len(done_e)
            watching -= len(done_e)
            n_active -= np.bincount(extra.links[done_e].ravel(), weights=np.repeat(weights_e[done_e], we),
                                    minlength=n_links)
            n_active[pad] = 0
    rate_e[active_e] = level
    return busbw_fraction(extra, rate_e, np.arange(k, dtype=np.int64))
