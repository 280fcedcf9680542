"""CP-SAT on aggregated counts, for the residual problems the local search leaves open.

One integer variable per (group, route) says how many of the group's flows take the route;
link loads are linear in them. Utilizations are scaled to integers (`SCALE` units per 1.0),
so the model's optimum is within 1/SCALE of the true one; the caller keeps whichever plan is
better when measured in floats. Warm-started with the current counts as a hint, with a time
limit. Dual-port balance is the second objective: |flows on p0 - flows on p1| summed over NICs.
Pure: ortools is the only library, and nothing it raises leaves this module.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
from ortools.sat.python import cp_model

from controller.te.instance import Instance, IntArray

SCALE = 100_000


def solve(inst: Instance, hint: list[IntArray], time_limit_s: float, upper: float,
          seed: int = 0, current: list[IntArray] | None = None,
          max_moves: int | None = None, wall_s: float | None = None) -> tuple[list[IntArray] | None, float]:
    """(counts with max utilization <= upper if found in time, proven lower bound on the max).

    Coefficients are rounded down, so the model never overstates a load and its proven
    objective bound is a bound on the true max utilization; it counts only when the instance
    has no background (otherwise a link the flows avoid would still weigh in).

    `current` and `max_moves` (a re-optimisation): at most `max_moves` flows leave the route
    they are on (`current` counts them per route), and among plans of the same maximum the
    one with the fewest moves wins, then the better port balance. The bound is then the
    bound under that budget, not a bound on the instance: it is returned as 0. `wall_s` caps
    the wall-clock time (the plan's deadline), which otherwise is a safety net of 4x the
    deterministic limit.
    """
    model = cp_model.CpModel()
    pad = len(inst.capacity_gbps) - 1
    x: list[list[cp_model.IntVar]] = []
    terms: dict[int, list[tuple[cp_model.IntVar, int]]] = defaultdict(list)
    ports: dict[tuple[str, str], dict[str, list[cp_model.IntVar]]] = defaultdict(lambda: defaultdict(list))
    for gi, (g, rl) in enumerate(zip(inst.groups, inst.route_links, strict=True)):
        n = len(g.flows)
        row = [model.new_int_var(0, n, f"x{gi}_{r}") for r in range(rl.shape[0])]
        model.add(sum(row) == n)
        for r, var in enumerate(row):
            model.add_hint(var, int(hint[gi][r]))
            ports[g.src][g.routes[r].src_node].append(var)
            for e in rl[r]:
                if e != pad:
                    terms[int(e)].append((var, math.floor(g.demand_gbps / float(inst.capacity_gbps[e]) * SCALE)))
        x.append(row)
    unbalance = []
    for nic, by_port in sorted(ports.items()):
        sums = [sum(v) for _, v in sorted(by_port.items())]
        if len(sums) == 2:
            t = model.new_int_var(0, sum(len(g.flows) for g in inst.groups if g.src == nic), f"t{nic}")
            model.add(t >= sums[0] - sums[1])
            model.add(t >= sums[1] - sums[0])
            unbalance.append(t)
    z = model.new_int_var(0, math.ceil(upper * SCALE) + 1, "z")
    for e, ts in terms.items():
        bg = math.floor(float(inst.background_gbps[e]) / float(inst.capacity_gbps[e]) * SCALE)
        model.add(sum(c * v for v, c in ts) + bg <= z)
    weight = inst.n_flows + 1
    moves = []
    if current is not None and max_moves is not None:
        for row, now in zip(x, current, strict=True):
            for var, here in zip(row, now.tolist(), strict=True):
                if here > 0:  # flows that leave this route: at least here - var of them
                    m = model.new_int_var(0, here, "")
                    model.add(m >= here - var)
                    moves.append(m)
        model.add(sum(moves) <= max_moves)
    model.minimize(z * weight * (max_moves + 1 if moves and max_moves is not None else 1)
                   + sum(moves) * weight + sum(unbalance))
    solver = cp_model.CpSolver()
    # deterministic time and interleaved workers: the same instance gives the same plan;
    # the wall-clock limit is only a safety net
    solver.parameters.max_deterministic_time = max(0.05, time_limit_s)
    solver.parameters.max_time_in_seconds = max(0.05, min(4 * time_limit_s, wall_s if wall_s is not None else 1e9))
    solver.parameters.num_workers = 2
    solver.parameters.interleave_search = True
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, 0.0
    # objective = z * weight + unbalance with 0 <= unbalance <= n_flows < weight
    z_bound = math.ceil((solver.best_objective_bound - inst.n_flows) / weight - 1e-9)
    proven = max(0, z_bound) / SCALE if float(inst.background_gbps.sum()) == 0 and not moves else 0.0
    return [np.array([solver.value(v) for v in row], dtype=np.int64) for row in x], proven
