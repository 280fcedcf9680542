"""C4P planning: place jobs' flows on routes, re-plan after link changes, and summarise.

`plan(fabric, targets, active, config)` plans the `targets` jobs' flows with every other
active job's flows as background load; with several targets it is the global
re-optimisation (warm-started from the current plan, within `Config.move_budget` moves).
Re-planning after a link change is `te.replan.replan_indexed`. Order of work: greedy + local
search with Kempe-chain steps, then CP-SAT on aggregated counts when a gap to a quick proven
bound remains, per independent part of the instance (`instance.components`) that is small
enough, then the summary. Pure: values in, values out.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from controller.domain.fabric import Fabric
from controller.domain.jobs import Assignment, Flow, FlowKey, PlanSummary
from controller.te import bound, colouring, cpsat, search
from controller.te.candidates import UNKNOWN, Candidates, Route, for_fabric
from controller.te.config import Config
from controller.te.instance import (
    ActiveJob,
    FlowId,
    Instance,
    IntArray,
    background,
    build_instance,
    components,
    job_demands,
    subset,
    to_route,
)
from controller.te.solution import (
    Status,
    loads_gbps,
    materialize,
    max_utilization,
    path_key,
    utilization,
)
from controller.te.summary import summarize
from controller.topology.graph import FabricView, Path


@dataclass(frozen=True, slots=True)
class JobPlan:
    job: str
    status: Status
    assignments: dict[FlowKey, Assignment]
    summary: PlanSummary | None
    error: str | None = None
    moved: int = 0
    joint_bound: float = 0.0  # CP-SAT's proven bound on the joint instance's max (0: none)
    violation: str | None = None  # a bound found above the plan (a bug): what and the instance


def solve_instance(inst: Instance, config: Config, deadline: float,
                   view: FabricView | None = None) -> tuple[list[IntArray], str, float]:
    """Counts for every group: the exact 2-tier method where it applies, else keep valid
    current routes, place the rest, improve and polish."""
    spines = colouring.applies(inst, view) if view is not None else None
    if spines is not None:
        reduced = colouring.reduce(inst, *spines)
        counts, solver, _ = _generic(reduced, config, deadline)
        real = colouring.expand(inst, reduced, counts, spines[0])
        if real is not None:
            return real, solver.replace("greedy", "ports:greedy") + "+spine-colouring", 0.0
    return _generic(inst, config, deadline)


def _generic(inst: Instance, config: Config, deadline: float) -> tuple[list[IntArray], str, float]:
    from controller.te.solution import counts_of_current

    state = search.greedy(inst, counts_of_current(inst))
    best = [c.copy() for c in state.counts]
    best_max = max_utilization(inst, best, only_used=False)
    solver = "greedy"
    quick = _quick_bound(inst, best)
    if config.move_budget != 0 and best_max > quick + 1e-9:
        search.improve(state, deadline, config.move_budget, config.search_depth, quick)
        now_max = max_utilization(inst, state.counts, only_used=False)
        if now_max < best_max - 1e-12:
            best, best_max, solver = [c.copy() for c in state.counts], now_max, "greedy+local-search"
    return _polish(inst, best, solver, config, deadline)


def _polish(inst: Instance, counts: list[IntArray], solver: str, config: Config,
            deadline: float) -> tuple[list[IntArray], str, float]:
    """CP-SAT on aggregated counts where a gap to a quick bound remains, decomposed: each set
    of groups that shares no link with the rest (`instance.components`: jobs in separate pods
    or planes, say) that holds the maximum is solved on its own, if small enough.

    Returns the counts (changed only if the maximum fell), the solver name and a proven
    lower bound on the maximum (the largest of the solved parts' CP-SAT bounds; 0: none)."""
    if config.move_budget is not None or config.cpsat_time_limit_s <= 0:
        return counts, solver, 0.0
    now = max_utilization(inst, counts, only_used=False)
    if now <= _quick_bound(inst, counts) + 1e-9:
        return counts, solver, 0.0
    hot: list[tuple[list[int], Instance, list[IntArray], float]] = []
    for part in components(inst):
        sub = subset(inst, part)
        own = [counts[g] for g in part]
        part_max = max_utilization(sub, own)
        if (part_max >= now - 1e-9 and sum(len(g.routes) for g in sub.groups) <= config.cpsat_max_variables
                and part_max > _quick_bound(sub, own) + 1e-9):
            hot.append((part, sub, own, part_max))
    out, proven = list(counts), 0.0
    for part, sub, own, part_max in hot:
        left = min(config.cpsat_time_limit_s, max(0.05, deadline - time.monotonic())) / len(hot)
        better, bound_of_part = cpsat.solve(sub, own, max(0.05, left), part_max, config.seed)
        proven = max(proven, bound_of_part)
        if better is not None and max_utilization(sub, better) < part_max - 1e-12:
            for g, c in zip(part, better, strict=True):
                out[g] = c
    if max_utilization(inst, out, only_used=False) < now - 1e-12:
        return out, solver + "+cp-sat" + (f"({len(hot)} parts)" if len(hot) > 1 else ""), proven
    return counts, solver, proven


def _quick_bound(inst: Instance, counts: list[IntArray]) -> float:
    """A cheap proven bound: duals from the plan's hot links, NIC pigeonhole, integrality."""
    util = utilization(inst, loads_gbps(inst, counts))
    return bound.rounded(inst, max(bound.heuristic_bound(inst, util), bound.nic_bound(inst)))


def _with_ports(cands: Candidates, inst: Instance, routes: dict[FlowId, Route]) -> dict[FlowId, Route]:
    """Source ports for the chosen routes that have none yet (a large instance's routes get
    theirs only when chosen: `Candidates.path_routes`); a route no port reaches within the
    sampling limit (rare: 4096 tries) is replaced by its port pair's least used route that
    has one."""
    out = dict(routes)
    used: dict[tuple[str, str, Path], int] = defaultdict(int)
    for r in routes.values():
        used[(r.src_node, r.dst_node, r.path)] += 1
    for fid, r in routes.items():
        if r.sport != UNKNOWN:
            continue
        sport = cands.sport_for(r)
        if sport is not None:
            out[fid] = r._replace(sport=sport)
            continue
        pair = cands.port_routes(r.src_node, r.dst_node)
        if not pair:
            raise RuntimeError(f"no source port reaches any path between {r.src_node} and {r.dst_node}")
        best = min(pair, key=lambda x: (used[(x.src_node, x.dst_node, x.path)], x.path))
        used[(best.src_node, best.dst_node, best.path)] += 1
        out[fid] = best
    return out


def _assignment(flow: Flow, r: Route) -> Assignment:
    return Assignment(flow.key, r.src_node, r.dst_node, r.sport, 1.0 / flow.flows_in_connection, r.path, r.links)


def _no_path(unroutable: list[tuple[FlowId, tuple[str, str], tuple[str, str]]]) -> dict[str, str]:
    failed: dict[str, str] = {}
    for (job, key), src, dst in sorted(unroutable, key=lambda u: u[0]):
        failed.setdefault(job, f"no path between ranks {key.src_rank} ({src[0]}:{src[1]}) and "
                               f"{key.dst_rank} ({dst[0]}:{dst[1]})")
    return failed


def plan(
    fabric: Fabric,
    targets: Mapping[str, list[Flow]],
    active: Mapping[str, ActiveJob],
    config: Config = Config(),
    cands: Candidates | None = None,
) -> dict[str, JobPlan]:
    """Plan the target jobs' flows; `active` holds every active job (targets may be among them).

    A target with a flow that has no path fails alone (status `no_path`, error naming the
    pair); the others are planned without it.
    """
    t0 = time.monotonic()
    cands = cands or for_fabric(fabric)
    everyone = {n: j for n, j in active.items()}
    for name, flows in targets.items():
        old = active.get(name)
        everyone[name] = ActiveJob(flows, old.assignments if old else {})
    demand = job_demands(fabric, everyone)
    bg = background(cands.view, everyone, set(targets), demand)
    current = {(n, k): to_route(cands.view, a) for n in targets for k, a in everyone[n].assignments.items()}
    inst, unroutable = build_instance(fabric, cands, targets, demand, bg, current, max_routes=config.max_routes)
    failed = _no_path(unroutable)
    if failed:
        out = {n: JobPlan(n, Status.NO_PATH, {}, None, failed[n]) for n in failed}
        ok = {n: f for n, f in targets.items() if n not in failed}
        if ok:
            out.update(plan(fabric, ok, {n: j for n, j in active.items() if n not in failed}, config, cands))
        return out
    counts, solver, joint_bound = solve_instance(inst, config, t0 + config.time_limit_s, cands.view)
    # CP-SAT's bound is the job's own bound only when nothing else loads the links (and when
    # the instance's routes are every path: else it is proven for those routes only)
    extra = joint_bound if len(targets) == 1 and float(inst.background_gbps.sum()) == 0 and inst.complete else 0.0
    routes, _ = materialize(inst, counts)
    routes = _with_ports(cands, inst, routes)
    plans: dict[str, ActiveJob] = dict(everyone)
    moved: dict[str, int] = {n: 0 for n in targets}
    for name, flows in targets.items():
        by_key = {f.key: f for f in flows}
        assigned = {}
        for f in flows:
            r = routes[(name, f.key)]
            assigned[f.key] = _assignment(by_key[f.key], r)
            was = current.get((name, f.key))
            if was is not None and path_key(was) != path_key(r):
                moved[name] += 1
        plans[name] = ActiveJob(flows, assigned)
    out = {}
    for name in sorted(targets):
        own = (inst, counts) if len(targets) == 1 else None
        status, summary, violation = summarize(fabric, cands, plans, name, demand, config, t0, solver, moved[name],
                                               extra, own)
        out[name] = JobPlan(name, status, dict(plans[name].assignments), summary, None, moved[name], joint_bound,
                            violation)
    return out
