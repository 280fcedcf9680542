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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from controller.domain.fabric import Fabric
from controller.domain.jobs import Assignment, Flow, FlowKey, PlanSummary
from controller.te import bound, colouring, cpsat, parts, search
from controller.te.candidates import UNKNOWN, Candidates, Nic, Route, for_fabric
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
    counts_of_current,
    loads_gbps,
    materialize,
    max_utilization,
    path_key,
    utilization,
)
from controller.te.summary import LoadBook, summarize
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


Progress = Callable[[str], None]  # told each phase as it starts: "routes", "placing", "improving", ...


@dataclass(frozen=True, slots=True)
class PartTask:
    """One independent part of a plan (`te.parts`), to be planned on its own, maybe in
    another process (`plan_part`): its target jobs, the active jobs that are its whole
    background, the config, and the plan's deadline (`time.monotonic()`, which on Linux is
    one clock for every process of the machine)."""

    targets: dict[str, list[Flow]]
    active: dict[str, ActiveJob]
    config: Config
    deadline: float


# Plans the tasks (in any processes) and returns their results in the tasks' order; what it
# raises, `plan` raises. Supplied by the caller: the pure core starts no process.
PartRunner = Callable[[Sequence[PartTask]], Sequence[Mapping[str, "JobPlan"]]]


def plan_part(fabric: Fabric, task: PartTask, cands: Candidates | None = None, share: float = 1.0) -> dict[str, JobPlan]:
    """`plan` of one part, within `share` of the whole plan's time limit and what is left of
    it (at least a tenth of the limit, so that a part that starts late still places every
    flow and proves its bound). A runner that plans n parts k at a time gives each k / n."""
    limit = task.config.time_limit_s
    left = max(limit / 10, min(limit * share, task.deadline - time.monotonic()))
    return plan(fabric, task.targets, task.active, replace(task.config, time_limit_s=left), cands)


def plan_parts_here(fabric: Fabric, tasks: Sequence[PartTask], cands: Candidates | None = None,
                    ) -> list[dict[str, JobPlan]]:
    """The parts one after the other in this thread (a `PartRunner`), each with an equal share
    of the time left (a part that finishes early leaves its time to the next ones)."""
    out = []
    for i, task in enumerate(tasks):
        left = task.deadline - time.monotonic()
        mine = replace(task, deadline=time.monotonic() + max(0.0, left) / (len(tasks) - i))
        out.append(plan_part(fabric, mine, cands))
    return out


def _quiet(_: str) -> None:
    return None


def solve_instance(inst: Instance, config: Config, deadline: float, view: FabricView | None = None,
                   progress: Progress = _quiet) -> tuple[list[IntArray], str, float]:
    """Counts for every group: the exact 2-tier method where it applies, else keep valid
    current routes, place the rest, improve and polish (until `deadline`, monotonic)."""
    spines = colouring.applies(inst, view) if view is not None else None
    if spines is not None:
        reduced = colouring.reduce(inst, *spines)
        counts, solver, _ = _generic(reduced, config, deadline, progress)
        real = colouring.expand(inst, reduced, counts, spines[0])
        if real is not None:
            return real, solver.replace("greedy", "ports:greedy") + "+spine-colouring", 0.0
    return _generic(inst, config, deadline, progress)


def _generic(inst: Instance, config: Config, deadline: float,
             progress: Progress = _quiet) -> tuple[list[IntArray], str, float]:
    progress("placing")
    state = search.greedy(inst, counts_of_current(inst))
    best = [c.copy() for c in state.counts]
    best_max = max_utilization(inst, best, only_used=False)
    solver = "greedy"
    quick = _quick_bound(inst, best)
    if config.move_budget != 0 and best_max > quick + 1e-9 and time.monotonic() < deadline:
        progress("improving")
        # half of what is left for the local search when CP-SAT may follow (it closes the
        # gaps the search leaves; the search alone would use all of it when it keeps finding
        # small steps)
        cpsat_next = config.cpsat_time_limit_s > 0 and sum(len(g.routes) for g in inst.groups) <= config.cpsat_max_variables
        now = time.monotonic()
        search.improve(state, now + (deadline - now) / 2 if cpsat_next else deadline, config.move_budget,
                       config.search_depth, quick)
        now_max = max_utilization(inst, state.counts, only_used=False)
        if now_max < best_max - 1e-12:
            best, best_max, solver = [c.copy() for c in state.counts], now_max, "greedy+local-search"
        if config.move_budget is not None and best_max > quick + 1e-9 and inst.current:
            # A re-optimisation whose search is stuck: a plan from scratch may be better; go
            # toward it within the move budget, fewest moves first.
            fresh = search.greedy(replace(inst, current={}))
            now = time.monotonic()
            search.improve(fresh, now + (deadline - now) / 3, None, config.search_depth, quick)
            if max_utilization(inst, fresh.counts, only_used=False) < best_max - 1e-12:
                moved = search.toward(search.SearchState(inst, best), fresh.counts, counts_of_current(inst),
                                      config.move_budget, now + 2 * (deadline - now) / 3)
                toward_max = max_utilization(inst, moved.counts, only_used=False)
                if toward_max < best_max - 1e-12:
                    best, best_max, solver = [c.copy() for c in moved.counts], toward_max, solver + "+toward-fresh"
    return _polish(inst, best, solver, config, deadline)


def _polish(inst: Instance, counts: list[IntArray], solver: str, config: Config,
            deadline: float) -> tuple[list[IntArray], str, float]:
    """CP-SAT on aggregated counts where a gap to a quick bound remains, decomposed: each set
    of groups that shares no link with the rest (`instance.components`: jobs in separate pods
    or planes, say) that holds the maximum is solved on its own, if small enough.

    Returns the counts (changed only if the maximum fell), the solver name and a proven
    lower bound on the maximum (the largest of the solved parts' CP-SAT bounds; 0: none)."""
    if config.move_budget == 0 or config.cpsat_time_limit_s <= 0 or time.monotonic() >= deadline:
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
    moved = _moves(inst, counts) if config.move_budget is not None else 0
    for part, sub, own, part_max in hot:
        if time.monotonic() >= deadline:
            break
        left = min(config.cpsat_time_limit_s, max(0.05, deadline - time.monotonic())) / len(hot)
        budget = None
        if config.move_budget is not None:  # the moves the search made elsewhere count too
            budget = max(0, config.move_budget - moved + _moves(sub, own))
        better, bound_of_part = cpsat.solve(sub, own, max(0.05, left), part_max, config.seed,
                                            counts_of_current(sub) if budget is not None else None, budget,
                                            wall_s=max(0.05, deadline - time.monotonic()))
        proven = max(proven, bound_of_part)
        if better is not None and max_utilization(sub, better) < part_max - 1e-12:
            for g, c in zip(part, better, strict=True):
                out[g] = c
    if max_utilization(inst, out, only_used=False) < now - 1e-12:
        return out, solver + "+cp-sat" + (f"({len(hot)} parts)" if len(hot) > 1 else ""), proven
    return counts, solver, proven


def _moves(inst: Instance, counts: list[IntArray]) -> int:
    """Flows that leave their current route in `counts` (the route they are on counts them)."""
    return sum(int(np.maximum(now - c, 0).sum()) for now, c in zip(counts_of_current(inst), counts, strict=True))


def _quick_bound(inst: Instance, counts: list[IntArray]) -> float:
    """A cheap proven bound: duals from the plan's hot links, NIC pigeonhole, a NIC's incoming
    demand over its links (`bound.receive_bound`), integrality. Proven over the instance's
    routes: what decides whether the search and CP-SAT may still lower the maximum."""
    util = utilization(inst, loads_gbps(inst, counts))
    return bound.rounded(inst, max(bound.heuristic_bound(inst, util), bound.nic_bound(inst),
                                   bound.receive_bound(inst)))


def _with_ports(cands: Candidates, routes: dict[FlowId, Route]) -> tuple[dict[FlowId, Route], bool]:
    """Source ports for the chosen routes that have none yet (a large instance's routes get
    theirs only when chosen: `Candidates.path_routes`); a route no port reaches within the
    sampling limit (rare: 4096 tries) is replaced by its port pair's least used route that
    has one. Also says whether any route was replaced."""
    out = dict(routes)
    replaced = False
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
        out[fid], replaced = best, True
    return out, replaced


def _summary_reserve_s(inst: Instance, config: Config) -> float:
    """The part of the time limit kept for the summary (bound, ECMP draws, simulation: about
    40 us per flow), at most a third of it."""
    return min(config.time_limit_s / 3, 0.05 + 40e-6 * inst.n_flows)


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
    progress: Progress = _quiet,
    lazy: Collection[str] = (),
    runner: PartRunner | None = None,
) -> dict[str, JobPlan]:
    """Plan the target jobs' flows; `active` holds every active job (targets may be among them).

    `runner`: new jobs (nothing `lazy`) on a fabric hashed by the model whose targets fall in
    independent parts (`te.parts.split`) with at least `Config.parallel_min_flows` flows in
    all are planned part by part through it (in parallel processes: `services.plan_pool`),
    each part with its own active jobs as background and the same deadline; the result is
    the union of the parts' (each part optimised on its own: no part's maximum waits for
    another's, and CP-SAT runs on every part that keeps a gap).

    Targets in `lazy` (planned jobs a joint re-plan may move) whose flows all stay where they
    are get no summary and are left out of the result: their plan did not change, and their
    summary is the caller's to refresh (a summary costs a pass over the job's background; a
    joint re-plan over many jobs would otherwise redo every one of them).

    A target with a flow that has no path fails alone (status `no_path`, error naming the
    pair); the others are planned without it.

    `config.time_limit_s` is a deadline for the whole plan: every flow is placed and a bound
    proven whatever the time; improvements (local search, CP-SAT) stop in time to leave the
    summary its share (`_summary_reserve_s`). `progress` is told each phase as it starts.
    """
    t0 = time.monotonic()
    progress("routes")
    cands = cands or for_fabric(fabric)
    if runner is not None and not lazy and len(targets) > 1 and cands.hashed_by_model \
            and sum(len(f) for f in targets.values()) >= config.parallel_min_flows:
        split = parts.split(cands.view, targets, active) if parts.apart(cands.view, targets) else []
        if len(split) > 1:
            tasks = [PartTask({n: targets[n] for n in p.targets}, {n: active[n] for n in p.active}, config,
                              t0 + config.time_limit_s) for p in split]
            joined: dict[str, JobPlan] = {}
            for got in runner(tasks):
                joined.update(got)
            return joined
    everyone = {n: j for n, j in active.items()}
    for name, flows in targets.items():
        old = active.get(name)
        everyone[name] = ActiveJob(flows, old.assignments if old else {})
    demand = job_demands(fabric, everyone)
    bg = background(cands.view, everyone, set(targets), demand)
    current = {(n, k): to_route(cands.view, a) for n in targets for k, a in everyone[n].assignments.items()}
    inst, unroutable = build_instance(fabric, cands, targets, demand, bg, current, max_routes=config.max_routes,
                                      routes_per_flow=config.routes_per_flow)
    failed = _no_path(unroutable)
    if failed:
        out = {n: JobPlan(n, Status.NO_PATH, {}, None, failed[n]) for n in failed}
        ok = {n: f for n, f in targets.items() if n not in failed}
        if ok:
            out.update(plan(fabric, ok, {n: j for n, j in active.items() if n not in failed}, config, cands, progress,
                        lazy))
        return out
    deadline = t0 + config.time_limit_s - _summary_reserve_s(inst, config)
    counts, solver, joint_bound = solve_instance(inst, config, deadline, cands.view, progress)
    # CP-SAT's bound is the job's own bound only when nothing else loads the links (and when
    # the instance's routes are every path: else it is proven for those routes only)
    extra = joint_bound if len(targets) == 1 and float(inst.background_gbps.sum()) == 0 and inst.complete else 0.0
    routes, _ = materialize(inst, counts)
    progress("ports")
    routes, replaced = _with_ports(cands, routes)
    plans: dict[str, ActiveJob] = dict(everyone)
    moved: dict[str, int] = {n: 0 for n in targets}
    unchanged: set[str] = set()
    for name, flows in targets.items():
        by_key = {f.key: f for f in flows}
        assigned = {}
        for f in flows:
            r = routes[(name, f.key)]
            assigned[f.key] = _assignment(by_key[f.key], r)
            was = current.get((name, f.key))
            if was is not None and path_key(was) != path_key(r):
                moved[name] += 1
        if name in lazy and assigned == everyone[name].assignments:
            unchanged.add(name)
            assigned = dict(everyone[name].assignments)
        plans[name] = ActiveJob(flows, assigned)
    progress("summary")
    out = {}
    # several targets: every job's flows counted once for all their summaries
    book = LoadBook(fabric, cands.view, plans, demand) if len(targets) - len(unchanged) > 1 else None
    for name in sorted(set(targets) - unchanged):
        own = (inst, counts) if len(targets) == 1 and not replaced else None
        status, summary, violation = summarize(fabric, cands, plans, name, demand, config, t0, solver, moved[name],
                                               extra, own, book)
        out[name] = JobPlan(name, status, dict(plans[name].assignments), summary, None, moved[name], joint_bound,
                            violation)
    return out


def plan_global(
    fabric: Fabric,
    targets: Mapping[str, list[Flow]],
    active: Mapping[str, ActiveJob],
    config: Config = Config(),
    cands: Candidates | None = None,
    progress: Progress = _quiet,
    budget: int = 0,
    lazy: Collection[str] = (),
    runner: PartRunner | None = None,
) -> dict[str, JobPlan]:
    """Plan new jobs across tenants: first with the other jobs' flows where they are (`plan`);
    then, when the fabric-wide maximum utilization is above what the NICs force (the joint
    pigeonhole bound) and time is left, every job jointly, at most `budget` of the other
    jobs' flows moving (the new jobs' are not deployed yet: free), fewest moves first. The
    joint plan is kept only if it lowers the fabric-wide maximum; then the result holds a
    plan for every job that moved (the others' plans are unchanged; their summaries are the
    caller's to refresh). `lazy`: targets that are planned already (a re-optimisation),
    likewise left out of the result when they do not move (see `plan`)."""
    t0 = time.monotonic()
    cands = cands or for_fabric(fabric)
    first = plan(fabric, targets, active, config, cands, progress, lazy, runner)  # (parts: see `plan`)
    others = {n: j for n, j in active.items() if n not in targets and j.assignments}
    flows = sum(len(f) for f in targets.values()) + sum(len(j.flows) for j in others.values())
    if (budget <= 0 or not others or any(p.summary is None for p in first.values())
            or flows > config.max_joint_flows or time.monotonic() - t0 > config.time_limit_s / 2):
        return first
    after = {**active, **{n: ActiveJob(f, first[n].assignments) for n, f in targets.items()}}
    demand = job_demands(fabric, after)
    top = fabric_max(cands.view, after, demand)
    # (the joint plan places the flows of `after`'s placed jobs: what they force, it cannot beat)
    if top <= _joint_pigeonhole(cands, {n: j for n, j in after.items() if j.assignments}, demand) + 1e-9:
        return first
    progress("rebalancing")
    unplaced = {**active, **{n: ActiveJob(f) for n, f in targets.items()}}
    jointly = {n: j.flows for n, j in unplaced.items() if n in targets or n in others}
    left = max(0.2, config.time_limit_s - (time.monotonic() - t0))
    second = plan(fabric, jointly, unplaced, replace(config, move_budget=budget, time_limit_s=left), cands,
                  lazy=set(others))
    if any(p.summary is None for p in second.values()):
        return first
    better = {**active, **{n: ActiveJob(j.flows, second[n].assignments) for n, j in unplaced.items() if n in second}}
    if fabric_max(cands.view, better, demand) < top - 1e-9:
        return second
    return first


def fabric_max(view: FabricView, jobs: Mapping[str, ActiveJob], demand: Mapping[Nic, float]) -> float:
    """The maximum utilization over every link direction of the fabric (all jobs' flows)."""
    loads = background(view, jobs, set(), demand)
    caps = {(x.name, d): x.capacity_gbps for x in view.fabric.links for d in ("ab", "ba")}
    return max((v / caps[d] for d, v in loads.items()), default=0.0)


def _joint_pigeonhole(cands: Candidates, jobs: Mapping[str, ActiveJob], demand: Mapping[Nic, float]) -> float:
    """A lower bound on the fabric-wide maximum of any plan of `jobs`' flows, from what the
    NICs force. Sending: every NIC's flows over its up ports: some port carries ceil(n / k).
    Receiving: every flow into a NIC arrives over one of its up ports' links, so the most
    loaded of them carries at least the NIC's incoming demand over their capacity (issue 18:
    at 1,000 active ring jobs the fabric-wide maximum is this, and the joint re-plan of every
    job that `plan_global` would try cannot lower it)."""
    count: dict[Nic, int] = defaultdict(int)
    into: dict[Nic, float] = defaultdict(float)
    for j in jobs.values():
        for f in j.flows:
            count[f.src] += 1
            into[f.dst] += demand[f.src]
    best = 0.0
    for nic, n in count.items():
        up = cands.up_ports(nic)
        caps = {cands.view.ports[p].capacity_gbps for p in up}
        if len(caps) == 1:
            best = max(best, -(-n // len(up)) * demand[nic] / caps.pop())
    for nic, total in into.items():
        cap = sum(cands.view.ports[p].capacity_gbps for p in cands.up_ports(nic))
        if cap > 0:
            best = max(best, total / cap)
    return best
