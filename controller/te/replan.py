"""Fast re-plan after a link changes state: only flows whose route broke move.

Each assignment is one of: still valid (kept as is); same path, but its source port no longer
hashes onto it because next-hop sets changed (kept on its path under a port that does, not a
move); or broken (its path uses a link that is not up, or is no longer equal-cost). Broken
flows keep their port pair where that costs nothing in maximum utilization, else take any
ports of their NICs (`_place`), placed by the min-max greedy with every other flow of every
job as background.

Bounds are decided here too (`te.carry`): for every planned job, re-planned or not, the
stored proven bound is kept when the change can only have raised the job's optimum, and
replaced by the NIC pigeonhole bound under the new state otherwise; `Replan.bounds` names
the jobs not re-planned whose bound the caller must replace. A re-planned job's summary keeps
its previous ECMP and simulation figures; the caller refreshes them in the background.

Cost: flows of port pairs the change did not touch (`Candidates.inherit`) are not looked at
one by one; with the caller's `PlanIndex` (flows per port pair, flow counts and load per
link direction) a re-plan costs O(port pairs + flows of touched pairs), and it returns the
index of its own result for the next change. Pure: values in, values out.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from controller.domain.fabric import Fabric
from controller.domain.jobs import Assignment, Flow, FlowKey, PlanSummary
from controller.te import search
from controller.te.candidates import Candidates, DirectedLink, Nic, Route
from controller.te.carry import (
    candidates_shrank,
    crosses,
    demand_factor,
    leaf_pairs,
    nic_ports,
    pigeonhole,
    port_links,
)
from controller.te.instance import (
    ActiveJob,
    FlowId,
    Instance,
    IntArray,
    build_instance,
    count_by_nic,
    demands_gbps,
)
from controller.te.planner import JobPlan
from controller.te.solution import Status, materialize
from controller.te.summary import BOUND_TOLERANCE
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path

Found = tuple[str, str, tuple[str, ...]]


def _resolve(cands: Candidates, assignments: list[Assignment], memo: dict[Found, int | None],
             ok: set[Found] | frozenset[Found] = frozenset()) -> None:
    """Fill `memo` for every (ports, path) in use: one sampling pass per port pair for the
    paths whose ports stopped hashing onto them, instead of one pass per path. `ok`: keys
    already known to pass `Candidates.path_ok`."""
    need: dict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)
    model = cands.hashed_by_model
    for a in assignments:
        if cands.known_routes(a.src_node, a.dst_node) is not None:  # inherited or computed: `_keep` takes them
            continue
        key = (a.src_node, a.dst_node, a.path)
        if key in memo:
            continue
        if key not in ok and not cands.path_ok(a.src_node, a.dst_node, a.path):
            memo[key] = None
        elif not model:
            continue
        elif not cands.path_changed(a.path):
            memo[key] = a.udp_sport  # no switch on the path changed its next hops: same hashes
        elif ref_v1_path(cands.view, a.src_node, a.dst_node, a.udp_sport) == a.path:
            memo[key] = a.udp_sport
        else:
            need[(a.src_node, a.dst_node)].add(a.path)
    for (s, d), paths in sorted(need.items()):
        found = cands.first_ports(s, d, paths)
        for p in paths:
            memo[(s, d, p)] = found.get(p)


def _keep(cands: Candidates, a: Assignment, memo: dict[Found, int | None],
          by_path: dict[tuple[str, str], dict[tuple[str, ...], Route]]) -> Assignment | None:
    """The assignment on its path with a port that hashes there now, or None if the path broke.

    Flows of one (ports, path) share the answer; a pair the change did not touch keeps its
    ports without any hashing (see `Candidates.inherit`)."""
    key = (a.src_node, a.dst_node, a.path)
    if key not in memo:
        pair = (a.src_node, a.dst_node)
        known = cands.known_routes(*pair)
        if known is not None:
            if pair not in by_path:
                by_path[pair] = {r.path: r for r in known}
            route = by_path[pair].get(a.path)
            memo[key] = None if route is None else route.sport
        elif not cands.path_ok(a.src_node, a.dst_node, a.path):
            memo[key] = None
        else:
            memo[key] = cands.port_for(a.src_node, a.dst_node, a.path, a.udp_sport)
    sport = memo[key]
    if sport is None:
        return None
    if sport == a.udp_sport or cands.hashes_onto(a.src_node, a.dst_node, a.path, a.udp_sport):
        return a
    return Assignment(a.key, a.src_node, a.dst_node, sport, a.weight, a.path, a.links)


@dataclass(frozen=True, slots=True)
class PlanIndex:
    """The current plans as a re-plan reads them, kept by the caller between link changes so
    that a re-plan costs O(port pairs + changed flows), not O(flows): `index_plans` builds one
    in O(flows), `replan_indexed` returns the next one. Valid for the exact assignments it
    was built from (the caller keys it, e.g. by job versions) and the demand it names."""

    demand: Mapping[Nic, float]
    by_pair: Mapping[str, Mapping[tuple[str, str], list[FlowKey]]]  # job -> (src port, dst port) -> flows
    links: Mapping[str, Counter[DirectedLink]]  # job -> flows per link direction
    nics: Mapping[str, Counter[Nic]]  # job -> flows per source NIC
    loads: Mapping[DirectedLink, float]  # every job together, Gb/s under `demand`
    nic_pairs: Mapping[str, frozenset[tuple[Nic, Nic]]]  # job -> (source NIC, destination NIC) of its flows


@dataclass(frozen=True, slots=True)
class Replan:
    """What a link change decides: new plans for the jobs with a changed assignment, the
    proven bound of every planned job not re-planned whose stored bound does not survive the
    change (`te.carry`), and the index of the plans after it (None when a job failed)."""

    plans: dict[str, JobPlan]
    bounds: dict[str, float]
    index: PlanIndex | None


def index_plans(view: FabricView, active: Mapping[str, ActiveJob], demand: Mapping[Nic, float]) -> PlanIndex:
    """The index of the jobs' current assignments (O(flows)); any view of the fabric will do
    (only link names and directions are read). Loads are summed per switch path (shared by
    every port pair between the same two leaves) and per host port, then spread over links."""
    core_of: dict[tuple[str, ...], tuple[DirectedLink, ...]] = {}
    by_pair: dict[str, dict[tuple[str, str], list[FlowKey]]] = {}
    links: dict[str, Counter[DirectedLink]] = {}
    loads: dict[DirectedLink, float] = defaultdict(float)
    for name, job in active.items():
        src_of = {f.key: (f.src_host, f.src_nic) for f in job.flows}
        pairs: dict[tuple[str, str], list[FlowKey]] = defaultdict(list)
        per_path: Counter[tuple[tuple[str, ...], Nic]] = Counter()
        for k, a in job.assignments.items():
            nic = src_of.get(k)
            if nic is None:
                continue
            pairs[(a.src_node, a.dst_node)].append(k)
            per_path[(a.path, nic)] += 1
        # (flows, Gb/s) per switch path, per source port and per destination port
        parts: dict[tuple[str, ...], tuple[int, float]] = {}
        for (path, nic), n in per_path.items():
            load = demand[nic] * n
            for key in (path[1:-1], path[:2], path[-2:]):
                had = parts.get(key)
                parts[key] = (n, load) if had is None else (had[0] + n, had[1] + load)
        count: Counter[DirectedLink] = Counter()
        for nodes, (n, load) in parts.items():
            hops = core_of.get(nodes)
            if hops is None:
                hops = core_of[nodes] = view.directed_links_of(nodes)
            for d in hops:
                count[d] += n
                loads[d] += load
        by_pair[name], links[name] = dict(pairs), count
    return PlanIndex(dict(demand), by_pair, links, {n: count_by_nic(j.flows) for n, j in active.items()}, dict(loads),
                     {n: frozenset((f.src, f.dst) for f in j.flows) for n, j in active.items()})


def replan_fast(fabric: Fabric, active: Mapping[str, ActiveJob], cands: Candidates,
                previous: Mapping[str, PlanSummary], before: FabricView | None = None) -> dict[str, JobPlan]:
    """`replan_indexed` without a kept index (it builds one: O(flows)); the new plans only."""
    return replan_indexed(fabric, active, cands, previous, before).plans


def replan_indexed(fabric: Fabric, active: Mapping[str, ActiveJob], cands: Candidates,
                   previous: Mapping[str, PlanSummary], before: FabricView | None = None,
                   index: PlanIndex | None = None, joined: Collection[str] = ()) -> Replan:
    """Re-plan after a link change (see the module docstring).

    `active`: every active job, pending ones (no assignments) included: they count in the
    demand. `previous`: the planned jobs' stored summaries, whose bounds are proven for the
    state before the change. `before`: a view of the fabric before the change (None: no
    bound is carried). `cands` should have inherited the candidates of the fabric the
    assignments were planned on (`Candidates.inherit`): then a flow of a port pair the change
    did not touch keeps its assignment without a look (else every flow is checked). `index`
    (from `index_plans` or the previous call) must match `active`; one that does not, or
    whose demand differs, is rebuilt. `joined`: jobs that became active with the change
    (failed jobs a link coming up makes pending again): their flows lower other jobs'
    demands, which scales carried bounds down (`te.carry.demand_factor`)."""
    t0 = time.monotonic()
    if index is not None and (set(index.by_pair) != set(active) or set(index.nics) != set(active) or any(
            sum(map(len, index.by_pair[n].values())) != len(j.assignments) for n, j in active.items())):
        index = None  # not the index of these jobs' plans
    nics = index.nics if index is not None else {n: count_by_nic(j.flows) for n, j in active.items()}
    total: Counter[Nic] = Counter()
    for name in active:
        total.update(nics[name])
    demand = demands_gbps(fabric, total)
    if index is None or index.demand != demand:
        index = index_plans(cands.view, active, demand)
    memo: dict[Found, int | None] = {}
    by_path: dict[tuple[str, str], dict[tuple[str, ...], Route]] = {}
    by_key: dict[str, dict[FlowKey, Flow]] = {}
    fixed_ports: dict[str, dict[FlowKey, Assignment]] = defaultdict(dict)
    broken: dict[str, list[Flow]] = defaultdict(list)
    touched: set[str] = set()
    pins: dict[FlowId, tuple[str, str]] = {}  # broken flows whose two ports are still up
    # Flows of port pairs the change did not touch (`Candidates.inherit`) keep their
    # assignments as they are: valid before, their paths and hashes are the same now.
    rest: list[tuple[str, FlowKey, Assignment]] = []
    for name, job in active.items():
        assigned = job.assignments
        for pair, keys in index.by_pair[name].items():
            if not cands.untouched(pair):
                rest += [(name, k, assigned[k]) for k in keys]
    # Port pairs with a flow whose path broke get all their routes next (the greedy's first
    # step needs them): their other flows then take their ports from those routes instead of
    # a sampling in `_resolve`.
    ok: set[Found] = set()
    for _, _, a in rest:
        found = (a.src_node, a.dst_node, a.path)
        if found in memo or found in ok:
            continue
        if cands.path_ok(*found):
            ok.add(found)
        else:
            memo[found] = None  # broken: `_resolve` and `_keep` take it from here
    moved_pairs = sorted({(s, d) for (s, d, _), v in memo.items() if v is None})
    for src_node, dst_node in moved_pairs:
        cands.port_routes(src_node, dst_node)
    _resolve(cands, [a for _, _, a in rest], memo, ok)
    for name, k, a in rest:
        pair = (a.src_node, a.dst_node)
        known = by_path.get(pair)
        if known is None and (pair_routes := cands.known_routes(*pair)) is not None:
            known = by_path[pair] = {r.path: r for r in pair_routes}
        route = known.get(a.path) if known is not None else None
        fixed: Assignment | None
        if route is not None and route.sport == a.udp_sport:
            continue
        fixed = _keep(cands, a, memo, by_path)
        if fixed is None:
            if name not in by_key:
                by_key[name] = {f.key: f for f in active[name].flows}
            broken[name].append(by_key[name][k])
            if cands.view.port_up(pair[0]) and cands.view.port_up(pair[1]):
                pins[(name, k)] = pair
            touched.add(name)
        elif fixed is not a:
            fixed_ports[name][k] = fixed
            touched.add(name)
    # The kept flows' load: every job's, less the broken flows' on their old paths.
    bg: dict[DirectedLink, float] = dict(index.loads)
    links = {name: index.links[name].copy() for name in broken}
    view = cands.view
    for name, flows in broken.items():
        count, assigned = links[name], active[name].assignments
        for f in flows:
            dem = demand[f.src]
            for d in view.directed_links_of(assigned[f.key].path):
                bg[d] -= dem
                count[d] -= 1
    for d, v in bg.items():
        if v < 1e-9:
            bg[d] = 0.0  # exactly: a link the broken flows left empty
    routes, unroutable, how = _place(fabric, cands, dict(broken), demand, bg, pins) if broken else ({}, [], "no moves")
    failed = {fid[0] for fid, _, _ in unroutable}
    loads = dict(bg)
    by_pair = dict(index.by_pair)
    out: dict[str, JobPlan] = {}
    for name in sorted(touched):
        if name in failed:
            key, s_nic, d_nic = next((fid[1], s, d) for fid, s, d in unroutable if fid[0] == name)
            out[name] = JobPlan(name, Status.NO_PATH, {}, None,
                                f"no path between ranks {key.src_rank} ({s_nic[0]}:{s_nic[1]}) and "
                                f"{key.dst_rank} ({d_nic[0]}:{d_nic[1]})")
            continue
        assigned = active[name].assignments
        plan = dict(assigned)
        plan.update(fixed_ports[name])
        job_pairs: dict[tuple[str, str], list[FlowKey]] | None = None
        for f in broken.get(name, []):
            r = routes[(name, f.key)]
            old = assigned[f.key]
            plan[f.key] = Assignment(f.key, r.src_node, r.dst_node, r.sport, 1.0 / f.flows_in_connection, r.path, r.links)
            dem = demand[f.src]
            for d in r.directed:
                loads[d] = loads.get(d, 0.0) + dem
                links[name][d] += 1
            if (r.src_node, r.dst_node) != (old.src_node, old.dst_node):  # other ports: move it in the index
                if job_pairs is None:
                    job_pairs = by_pair[name] = dict(by_pair[name])
                at = job_pairs[(old.src_node, old.dst_node)] = list(job_pairs[(old.src_node, old.dst_node)])
                at.remove(f.key)
                job_pairs[(r.src_node, r.dst_node)] = [*job_pairs.get((r.src_node, r.dst_node), []), f.key]
        out[name] = JobPlan(name, Status.FEASIBLE, plan, None, None, len(broken.get(name, [])))
    # Bounds (`te.carry`): the link directions other jobs' flows left are a job's background
    # that dropped; a failed job's flows leave all of theirs.
    left: dict[str, set[DirectedLink]] = {name: {d for f in flows for d in view.directed_links_of(
        active[name].assignments[f.key].path)} for name, flows in broken.items()}
    for name in failed:
        left[name] = set(index.links[name])
    ports = nic_ports(view)
    earlier: Counter[Nic] = Counter()
    for name in active:
        if name not in joined:
            earlier.update(nics[name])
    alpha = demand_factor(earlier, total)
    floors = {name: pigeonhole(view, nics[name], demand, ports) for name in previous if name in active}

    def carried(name: str) -> bool:
        if before is None or name not in previous:
            return False
        pairs = index.nic_pairs[name]
        leaves = leaf_pairs(view, pairs, ports)
        if not candidates_shrank(before, view, {n for pair in pairs for n in pair}, leaves):
            return False
        gone = set().union(*(v for o, v in left.items() if o != name))
        return not gone or not crosses(view, leaves, port_links(view, {n for pair in pairs for n in pair}, ports), gone)

    caps = {(link.name, d): link.capacity_gbps for link in fabric.links for d in ("ab", "ba")}
    for name, p in out.items():
        if p.status == Status.NO_PATH:
            continue
        used = links.get(name, index.links[name])
        achieved = max((loads.get(d, 0.0) / caps[d] for d, n in used.items() if n > 0), default=0.0)
        prev = previous.get(name)
        floor = floors.get(name, 0.0)
        keep = carried(name)
        bound = max(alpha * prev.lower_bound, floor) if prev is not None and keep else floor
        violation = None
        if bound > achieved + BOUND_TOLERANCE:  # a bug: never clamped, reported and replaced
            violation = (f"re-plan bound {bound!r} above the achieved {achieved!r} of job {name!r} "
                         f"({'carried' if keep else 'pigeonhole'}; {len(p.assignments)} flows)")
            bound = floor if floor <= achieved + BOUND_TOLERANCE else 0.0
        summary = PlanSummary(
            len(p.assignments), round(achieved, 9), round(bound, 9),
            prev.ecmp_expected_max_utilization if prev else 0.0, round((time.monotonic() - t0) * 1000),
            f"replan: greedy for broken flows ({how}); bound {'carried over' if keep else 'pigeonhole'}",
            prev.predicted_busbw_fraction if prev else 0.0,
            prev.ecmp_predicted_busbw_fraction if prev else 0.0, p.moved, prev.paths_known if prev else 1.0)
        status = Status.OPTIMAL if achieved <= bound + BOUND_TOLERANCE else Status.FEASIBLE
        out[name] = replace(p, summary=summary, status=status, violation=violation)
    bounds = {}
    for name in previous:
        if name in active and name not in out:
            lb = max(alpha * previous[name].lower_bound, floors[name]) if carried(name) else floors[name]
            if lb < previous[name].lower_bound:
                bounds[name] = round(lb, 9)
    if failed:
        return Replan(out, bounds, None)
    new_links = {**index.links, **links}
    return Replan(out, bounds, PlanIndex(index.demand, by_pair, new_links, index.nics, loads, index.nic_pairs))


def _place(fabric: Fabric, cands: Candidates, broken: dict[str, list[Flow]], demand: Mapping[Nic, float],
           bg: Mapping[DirectedLink, float], pins: Mapping[FlowId, tuple[str, str]],
           ) -> tuple[dict[FlowId, Route], list[tuple[FlowId, Nic, Nic]], str]:
    """Routes for the broken flows by the min-max greedy over the kept flows' load.

    First each flow keeps its port pair (its NICs' port balance stays as planned, and only
    that pair's routes are needed: a few hundred pairs instead of every port combination of
    the NICs). That stands when the moved flows raise no link above the highest load the
    kept flows already have (then no choice could lower the maximum); otherwise the flows
    are placed again over any ports of their NICs, and the lower maximum wins (the first on a
    tie). A flow whose pair has no route takes any ports of its NICs in both.

    (Restricting the first step further, to the pair's paths the change did not touch, needs
    no hashing but fails in the common case: in a fully loaded non-blocking fabric the
    source leaf's other uplinks are full, so flows that lost a spine-core link must stay on
    their spine, whose paths all changed.)"""
    caps = {(link.name, d): link.capacity_gbps for link in fabric.links for d in ("ab", "ba")}
    floor = max((v / caps[d] for d, v in bg.items()), default=0.0)
    best: tuple[float, Instance, list[IntArray], list[tuple[FlowId, Nic, Nic]], str] | None = None
    steps: list[tuple[str, Callable[[str, str], tuple[Route, ...]] | None]] = [
        ("ports kept", cands.port_routes), ("ports chosen", None)]
    for how, routes_of in steps:
        pinned = {fid: pair for fid, pair in pins.items() if routes_of(*pair)} if routes_of is not None else {}
        if routes_of is not None and not pinned:
            continue
        inst, unroutable = build_instance(fabric, cands, broken, demand, bg, pinned=pinned, pinned_routes=routes_of)
        state = search.greedy(inst)
        counts = state.counts
        m = float((state.load[:-1] / state.cap[:-1]).max()) if len(state.cap) > 1 else 0.0
        if best is None or m < best[0] - 1e-9:
            best = (m, inst, counts, unroutable, how)
        if m <= floor + 1e-9:
            break
    assert best is not None
    routes, _ = materialize(best[1], best[2])
    return routes, best[3], best[4]
