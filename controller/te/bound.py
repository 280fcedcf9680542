"""Proven lower bounds on the max link utilization of any single-path assignment.

Every figure returned here is a bound by weak LP duality or by counting, never an estimate:

- `dual_bound(inst, w)`: for any weights w >= 0 on link directions summing to 1, the max
  utilization is at least the w-weighted mean, which is at least the sum over groups of
  n_g * d_g * (cheapest route under w). The LP's duals give the best w; when the LP is too
  big (or GLOP stops early) weights from the heuristic's hot links still give a valid bound.
- `nic_bound`: a NIC with n equal flows over k equal up ports puts ceil(n/k) on one of them.
- `receive_bound`: a NIC's incoming flows arrive over its links, on their background
  (water-filled). Over the instance's routes, like the others: the planner's quick bound and
  a complete instance's summary bound (every equal-cost path), not `structural_bound`.
- `rounded`: link loads are multiples of the demands' common unit, so the bound lifts to the
  next value a link can actually take.
- `structural_bound`: for an instance whose routes are not every equal-cost path (a large
  instance's subset, probed mode's known paths), the dual bound with the cheapest route
  taken over every up port pair and every equal-cost path of the fabric (per leaf pair, not
  per route), and the pigeonhole bound over every up port of each NIC; background load is
  not credited there (weaker, still proven).

Background load (other jobs' flows) counts on a link direction only when this instance's
flows use it; the LP relaxes that with y_e >= load_e / (largest possible load_e), which the
integral case satisfies, so the link's coefficient becomes 1 + bg_e / Lmax_e.
Pure: ortools' GLOP is the only solver touched, and its exceptions do not leave this module.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from ortools.linear_solver import pywraplp

from controller.te.candidates import Candidates
from controller.te.instance import FloatArray, Instance
from controller.te.pathspace import PathSpace

LP_MAX_NONZEROS = 600_000


def link_weights(inst: Instance) -> FloatArray:
    """a_e / c_e per link direction (padding gets 0)."""
    lmax = np.zeros(len(inst.capacity_gbps))
    if float(inst.background_gbps.sum()) > 0:  # only needed to weigh background load
        for g, rl in zip(inst.groups, inst.route_links, strict=True):
            lmax[np.unique(rl)] += len(g.flows) * g.demand_gbps
    with np.errstate(divide="ignore", invalid="ignore"):
        a = 1.0 + np.where(lmax > 0, inst.background_gbps / np.maximum(lmax, 1e-300), 0.0)
        coef: FloatArray = np.where(np.isfinite(inst.capacity_gbps), a / inst.capacity_gbps, 0.0)
    return coef


def dual_bound(inst: Instance, w: FloatArray, coef: FloatArray | None = None) -> float:
    """The weak-duality bound for link weights w (any w >= 0 with a positive sum);
    `coef` is `link_weights(inst)` when the caller has it."""
    w = np.maximum(w, 0.0)
    w[-1] = 0.0
    total = float(w.sum())
    if total <= 0:
        return 0.0
    per_link = (w / total) * (coef if coef is not None else link_weights(inst))
    if not inst.groups:
        return 0.0
    flat, _ = inst.flat_routes()
    cheapest = np.minimum.reduceat(per_link[flat].sum(axis=1), inst.group_starts())
    volume = np.array([len(g.flows) * g.demand_gbps for g in inst.groups])
    return float((volume * cheapest).sum())


def lp_bound(inst: Instance, time_limit_s: float = 5.0) -> tuple[float, str]:
    """(bound, how) from GLOP's duals; ("skipped") when the LP is larger than the cap."""
    nnz = sum(rl.size for rl in inst.route_links)
    if nnz > LP_MAX_NONZEROS or not inst.groups:
        return 0.0, "lp-skipped"
    coef = link_weights(inst)
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return 0.0, "lp-unavailable"
    solver.SetTimeLimit(int(time_limit_s * 1000))
    u = solver.NumVar(0.0, solver.infinity(), "U")
    rows: dict[int, pywraplp.Constraint] = {}
    pad = len(inst.capacity_gbps) - 1
    terms: dict[int, list[tuple[pywraplp.Variable, float]]] = defaultdict(list)
    # a route crosses a link direction at most once, so each (x, row) pair is set once
    for gi, (g, rl) in enumerate(zip(inst.groups, inst.route_links, strict=True)):
        n = float(len(g.flows))
        total = solver.Constraint(n, n)
        for r in range(rl.shape[0]):
            x = solver.NumVar(0.0, n, f"x{gi}_{r}")
            total.SetCoefficient(x, 1.0)
            for e in rl[r]:
                if e != pad:
                    terms[int(e)].append((x, g.demand_gbps * float(coef[e])))
    for e in sorted(terms):
        row = solver.Constraint(-solver.infinity(), 0.0)
        row.SetCoefficient(u, -1.0)
        for x, c in terms[e]:
            row.SetCoefficient(x, c)
        rows[e] = row
    solver.Minimize(u)
    status = solver.Solve()
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return 0.0, "lp-failed"
    w = np.zeros(len(inst.capacity_gbps))
    for e, row in rows.items():
        w[e] = -row.dual_value()
    return dual_bound(inst, w), "lp" if status == pywraplp.Solver.OPTIMAL else "lp-partial"


def heuristic_bound(inst: Instance, util: FloatArray) -> float:
    """Best dual bound over weights that concentrate on the hottest links of a known plan."""
    best = 0.0
    top = float(util[:-1].max()) if len(util) > 1 else 0.0
    if top <= 0:
        return 0.0
    coef = link_weights(inst)
    for eta in (5.0, 20.0, 80.0, 320.0):
        w = np.exp(eta * (util - top))
        w[~np.isfinite(w)] = 0.0
        best = max(best, dual_bound(inst, w, coef))
    return best


def nic_bound(inst: Instance) -> float:
    """Pigeonhole over each NIC's up ports, for NICs with equal port capacities."""
    flows: dict[tuple[str, str], int] = defaultdict(int)
    demand: dict[tuple[str, str], float] = {}
    ports: dict[tuple[str, str], dict[str, tuple[str, str]]] = defaultdict(dict)
    for g in inst.groups:
        flows[g.src] += len(g.flows)
        demand[g.src] = g.demand_gbps
        for r in g.routes:
            ports[g.src][r.src_node] = r.directed[0]
    index = inst.link_index()
    best = 0.0
    for nic, n in flows.items():
        caps, bgs = [], []
        for p in sorted(ports[nic]):
            i = index[ports[nic][p]]
            caps.append(float(inst.capacity_gbps[i]))
            bgs.append(float(inst.background_gbps[i]))
        if len(caps) != len(ports[nic]) or not caps or max(caps) != min(caps):
            continue
        k = len(caps)
        best = max(best, (math.ceil(n / k) * demand[nic] + min(bgs)) / caps[0])
    return best


def receive_bound(inst: Instance) -> float:
    """Every flow into a NIC arrives over the last link of one of its group's routes, on top
    of that link's background: the NIC's incoming demand water-filled over those links (the
    lowest background first) is a lower bound on the max over the links used, and so over
    every link. Cheap (the last link of each route); what decides the maximum when many jobs'
    flows converge on NICs (issue 18: most batches at 1,000 active ring jobs)."""
    index = inst.link_index()
    into: dict[tuple[str, str], float] = defaultdict(float)
    last: dict[tuple[str, str], set[int]] = defaultdict(set)
    for g in inst.groups:
        into[g.dst] += len(g.flows) * g.demand_gbps
        last[g.dst].update(index[r.directed[-1]] for r in g.routes)
    best = 0.0
    for nic, demand in into.items():
        links = sorted((float(inst.background_gbps[i]) / float(inst.capacity_gbps[i]), i) for i in last[nic]
                       if math.isfinite(float(inst.capacity_gbps[i])) and inst.capacity_gbps[i] > 0)
        if not links or len(links) != len(last[nic]):
            continue
        load, cap = demand, 0.0
        for k, (_, i) in enumerate(links):
            load += float(inst.background_gbps[i])
            cap += float(inst.capacity_gbps[i])
            level = load / cap
            if k + 1 == len(links) or level <= links[k + 1][0]:
                best = max(best, level)
                break
    return best


@functools.lru_cache(maxsize=65536)
def _rational(v: float) -> Fraction:
    """`v` as the nearest fraction with a denominator up to 10^6 (memoised: a summary asks
    for every background load of its instance, and loads repeat across jobs and plans)."""
    return Fraction(v).limit_denominator(1_000_000)


def load_unit(values: list[float]) -> float | None:
    """The largest u with every value an integer multiple of u (exact rationals), or None."""
    fracs = [_rational(v) for v in values if v > 0]
    if not fracs or any(abs(float(f) - v) > 1e-9 * max(1.0, v) for f, v in zip(fracs, [v for v in values if v > 0], strict=True)):
        return None
    # gcd of fractions n_i/d_i = gcd(n_i * (L / d_i)) / L with L the lcm of the d_i: the same
    # value as folding Fraction gcds pairwise, in two C-level calls (hundreds of background loads)
    common = math.lcm(*{f.denominator for f in fracs})
    return float(Fraction(math.gcd(*(f.numerator * (common // f.denominator) for f in fracs)), common))


def rounded(inst: Instance, bound: float) -> float:
    """Lift a bound to the next achievable value: every load is an integer combination of the
    demands (and background loads), so it is a multiple of their common unit u, and the max
    utilization is k * u / c for some link capacity c.

    The unit is folded in value by value (`_fold_unit`), and the folding stops as soon as the
    unit so far is too fine to count in (issue 18: with many jobs' background loads the exact
    unit is a fraction with a huge denominator, and finding it was most of a summary's
    bound): the unit only gets finer as values are folded in, so the bound would be returned
    unlifted anyway. Otherwise the same unit as `load_unit`, so the same lift."""
    if bound <= 0:
        return bound
    caps = np.unique(inst.capacity_gbps[:-1])

    def steps(unit: float) -> list[float] | None:
        with np.errstate(over="ignore", divide="ignore"):
            out = [float(bound * c / unit) for c in caps]
        return out if all(math.isfinite(k) and k < 2.0 ** 52 for k in out) else None

    unit = _fold_unit(sorted({g.demand_gbps for g in inst.groups} | {float(b) for b in inst.background_gbps if b > 0}),
                      lambda u: u > 0 and steps(u) is None)
    if unit is None or unit <= 0:
        return bound
    ks = steps(unit)
    if ks is None:
        return bound  # a unit too fine to count in (many unrelated loads): no lift
    candidates = [math.ceil(k - 1e-7) * unit / c for k, c in zip(ks, caps, strict=True)]
    return float(max(bound, min(candidates)))


def _fold_unit(values: list[float], too_fine: Callable[[float], bool]) -> float | None:
    """`load_unit(values)`, or None as soon as the unit of the values folded so far is
    `too_fine` (the unit of more values divides it: finer still). Each value is made a
    fraction as it is folded in (a value no fraction matches: None, as `load_unit`)."""
    num = den = 0
    for v in values:
        if v <= 0:
            continue
        f = _rational(v)
        if abs(float(f) - v) > 1e-9 * max(1.0, v):
            return None
        if not den:
            num, den = f.numerator, f.denominator
            continue
        # gcd(a/b, c/d) = gcd(a * L/b, c * L/d) / L, L = lcm(b, d): exact, as `load_unit`'s
        common = math.lcm(den, f.denominator)
        num, den = math.gcd(num * (common // den), f.numerator * (common // f.denominator)), common
        if too_fine(num / den):  # (int division rounds correctly: float(Fraction(num, den)), no gcd)
            return None
    return num / den if den else None


def structural_bound(inst: Instance, cands: Candidates, util: FloatArray,
                     space: PathSpace | None = None) -> tuple[float, str]:
    """(bound, how) over every equal-cost path of the fabric for the instance's groups (see the
    module docstring); `util` is the plan's utilization per instance link (weights from its
    hottest links, as `heuristic_bound`)."""
    nic = _structural_nic_bound(inst, cands)
    best, how = 0.0, "nic"
    top = float(util[:-1].max()) if len(util) > 1 else 0.0
    if top > 0 and inst.groups:
        space = space or PathSpace(cands, inst)
        volume = np.array([len(g.flows) * g.demand_gbps for g in inst.groups])
        for eta in (5.0, 20.0, 80.0, 320.0):
            w = np.zeros(len(space.capacity))
            w[: len(inst.links)] = np.exp(eta * (util[:-1] - top))
            total = float(w.sum())
            if total <= 0:
                continue
            cheapest = space.cheapest(w / total / space.capacity)
            if np.isfinite(cheapest).all():
                value = float((volume * cheapest).sum())
                if value > best:
                    best, how = value, "dual over all paths"
    return (nic, "nic") if nic >= best else (best, how)


def _structural_nic_bound(inst: Instance, cands: Candidates) -> float:
    """`nic_bound` over every up port of each source NIC (not only the ports of the routes)."""
    flows: dict[tuple[str, str], int] = defaultdict(int)
    demand: dict[tuple[str, str], float] = {}
    for g in inst.groups:
        flows[g.src] += len(g.flows)
        demand[g.src] = g.demand_gbps
    best = 0.0
    for nic, n in flows.items():
        up = cands.up_ports(nic)
        caps = {cands.view.ports[p].capacity_gbps for p in up}
        if len(caps) == 1:
            best = max(best, math.ceil(n / len(up)) * demand[nic] / caps.pop())
    return best
