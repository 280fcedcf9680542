"""Fast re-plan after a link changes state: only flows whose route broke move.

Each assignment is one of: still valid (kept as is); same path, but its source port no longer
hashes onto it because next-hop sets changed (kept on its path under a port that does, not a
move); or broken (its path uses a link that is not up, or is no longer equal-cost). Broken
flows are placed by the min-max greedy with every other flow of every job as background.
The summary carries the previous proven bound (taking a link down or draining it removes
options, so the optimum cannot fall) and the previous ECMP and simulation figures; the
caller refreshes them in the background. Pure: values in, values out.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from controller.domain.fabric import Fabric
from controller.domain.jobs import Assignment, Flow, FlowKey, PlanSummary
from controller.te import search
from controller.te.candidates import Candidates, DirectedLink, ModelPorts, Route
from controller.te.instance import ActiveJob, build_instance, job_demands
from controller.te.planner import JobPlan
from controller.te.solution import Status, materialize
from controller.topology.hashing import ref_v1_path

Found = tuple[str, str, tuple[str, ...]]


def _resolve(cands: Candidates, assignments: list[Assignment], memo: dict[Found, int | None]) -> None:
    """Fill `memo` for every (ports, path) in use: one sampling pass per port pair for the
    paths whose ports stopped hashing onto them, instead of one pass per path."""
    need: dict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)
    pairs = cands._pairs
    model = cands.view.fabric.hashing.mode == "model" and isinstance(cands.ports, ModelPorts)
    for a in assignments:
        if (a.src_node, a.dst_node) in pairs:  # untouched pair: `_keep` takes its routes
            continue
        key = (a.src_node, a.dst_node, a.path)
        if key in memo:
            continue
        if not cands.path_ok(a.src_node, a.dst_node, a.path):
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
        assert isinstance(cands.ports, ModelPorts)
        found = cands.ports._sample(s, d, paths)
        for p in paths:
            memo[(s, d, p)] = found.get(p)


def _keep(cands: Candidates, a: Assignment, memo: dict[Found, int | None],
          by_path: dict[tuple[str, str], dict[tuple[str, ...], Route]],
          directed: dict[Found, tuple[DirectedLink, ...]]) -> Assignment | None:
    """The assignment on its path with a port that hashes there now, or None if the path broke.

    Flows of one (ports, path) share the answer; a pair the change did not touch keeps its
    ports without any hashing (see `Candidates.inherit`)."""
    key = (a.src_node, a.dst_node, a.path)
    if key not in memo:
        pair = (a.src_node, a.dst_node)
        known = cands._pairs.get(pair)
        if known is not None:
            if pair not in by_path:
                by_path[pair] = {r.path: r for r in known}
            route = by_path[pair].get(a.path)
            memo[key] = None if route is None else route.sport
            if route is not None:
                directed[key] = route.directed
        elif not cands.path_ok(a.src_node, a.dst_node, a.path):
            memo[key] = None
        else:
            memo[key] = cands.port_for(a.src_node, a.dst_node, a.path, a.udp_sport)
    sport = memo[key]
    if sport is None:
        return None
    if key not in directed:
        directed[key] = cands.view.directed_links_of(a.path)
    if sport == a.udp_sport or cands.still_valid(route_of(a)):
        return a
    return replace(a, udp_sport=sport)


def pigeonhole(cands: Candidates, flows: list[Flow], demand: Mapping[tuple[str, str], float]) -> float:
    """Proven for any assignment: a NIC's n flows over k equal up ports put ceil(n/k) on one."""
    count: dict[tuple[str, str], int] = defaultdict(int)
    for f in flows:
        count[f.src] += 1
    best = 0.0
    for nic, n in count.items():
        caps = {cands.view.ports[p].capacity_gbps for p in cands.up_ports(nic)}
        if len(caps) == 1:
            k = len(cands.up_ports(nic))
            best = max(best, -(-n // k) * demand[nic] / caps.pop())
    return best


def replan_fast(fabric: Fabric, active: Mapping[str, ActiveJob], cands: Candidates,
                previous: Mapping[str, PlanSummary], carry_bound: bool = True) -> dict[str, JobPlan]:
    """New plans for the jobs with any changed assignment; {} when nothing broke.

    `carry_bound`: the change only took capacity away (down, drained), so the previous
    proven bound still holds; otherwise (a link came up) only the pigeonhole bound is used
    until the caller's background refresh recomputes the full one."""
    t0 = time.monotonic()
    memo: dict[Found, int | None] = {}
    hop_memo: dict[Found, tuple[DirectedLink, ...]] = {}
    by_path: dict[tuple[str, str], dict[tuple[str, ...], Route]] = {}
    kept: dict[str, dict[FlowKey, Assignment]] = {}
    by_key: dict[str, dict[FlowKey, Flow]] = {}
    # The distinct hop tuples each job's flows use (by identity: `hop_memo` shares them),
    # instead of one entry per flow: enough for the job's used links below.
    used_hops: dict[str, dict[int, tuple[DirectedLink, ...]]] = defaultdict(dict)
    broken: dict[str, list[Flow]] = defaultdict(list)
    touched: set[str] = set()
    demand = job_demands(fabric, active)
    bg: dict[DirectedLink, float] = defaultdict(float)
    pairs = cands._pairs
    # NIC pairs with a flow whose path broke get all their candidates first (the greedy needs
    # them anyway): the kept flows of their port pairs then take their ports from those routes
    # instead of a second sampling in `_resolve`.
    moved_nics: set[tuple[tuple[str, str], tuple[str, str]]] = set()
    for job in active.values():
        nics: dict[FlowKey, tuple[tuple[str, str], tuple[str, str]]] | None = None
        for k, a in job.assignments.items():
            if (a.src_node, a.dst_node) in pairs or cands.path_ok(a.src_node, a.dst_node, a.path):
                continue
            if nics is None:
                nics = {f.key: (f.src, f.dst) for f in job.flows}
            if k in nics:
                moved_nics.add(nics[k])
    for s, d in sorted(moved_nics):
        cands.nic_routes(s, d)
    _resolve(cands, [a for job in active.values() for a in job.assignments.values()], memo)
    for name, job in active.items():
        flows_of = by_key[name] = {f.key: f for f in job.flows}
        kept_j: dict[FlowKey, Assignment] = {}
        hops_j = used_hops[name]
        kept[name] = kept_j
        for k, a in job.assignments.items():
            pair = (a.src_node, a.dst_node)
            known = by_path.get(pair)
            if known is None and pair in pairs:  # a pair the change did not touch (`inherit`)
                known = by_path[pair] = {r.path: r for r in pairs[pair]}
            route = known.get(a.path) if known is not None else None
            fixed: Assignment | None
            if route is not None and route.sport == a.udp_sport:  # kept as is: no hashing, no memo
                fixed, h = a, route.directed
            else:
                fixed = _keep(cands, a, memo, by_path, hop_memo)
                h = hop_memo.get((a.src_node, a.dst_node, a.path), ())
            if fixed is None:
                broken[name].append(flows_of[k])
                touched.add(name)
                continue
            if fixed.udp_sport != a.udp_sport:
                touched.add(name)
            kept_j[k] = fixed
            hops_j[id(h)] = h
            f = flows_of.get(k)
            if f is not None:  # background: every kept flow's load, in the same order as before
                dem = demand[f.src]
                for d in h:
                    bg[d] += dem
    if not touched:
        return {}
    inst, unroutable = build_instance(fabric, cands, dict(broken), demand, bg)
    failed = {fid[0] for fid, _, _ in unroutable}
    routes, _ = materialize(inst, search.greedy(inst).counts)
    loads = dict(bg)
    out: dict[str, JobPlan] = {}
    for name in sorted(touched):
        if name in failed:
            key, s_nic, d_nic = next((fid[1], s, d) for fid, s, d in unroutable if fid[0] == name)
            out[name] = JobPlan(name, Status.NO_PATH, {}, None,
                                f"no path between ranks {key.src_rank} ({s_nic[0]}:{s_nic[1]}) and "
                                f"{key.dst_rank} ({d_nic[0]}:{d_nic[1]})")
            continue
        plan = dict(kept[name])
        for f in broken.get(name, []):
            r = routes[(name, f.key)]
            plan[f.key] = Assignment(f.key, r.src_node, r.dst_node, r.sport, 1.0 / f.flows_in_connection, r.path, r.links)
            used_hops[name][id(r.directed)] = r.directed
            for d in r.directed:
                loads[d] = loads.get(d, 0.0) + demand[f.src]
        out[name] = JobPlan(name, Status.FEASIBLE, plan, None, None, len(broken.get(name, [])))
    caps = {(link.name, d): link.capacity_gbps for link in fabric.links for d in ("ab", "ba")}
    for name, p in out.items():
        if p.status == Status.NO_PATH:
            continue
        used = {d for h in used_hops[name].values() for d in h}
        achieved = max((loads.get(d, 0.0) / caps[d] for d in used), default=0.0)
        prev = previous.get(name)
        floor = pigeonhole(cands, active[name].flows, demand)
        bound = max(prev.lower_bound, floor) if prev is not None and carry_bound else floor
        bound = min(bound, achieved)
        summary = PlanSummary(
            len(p.assignments), round(achieved, 9), round(bound, 9),
            prev.ecmp_expected_max_utilization if prev else 0.0, round((time.monotonic() - t0) * 1000),
            "replan: greedy for broken flows; bound carried over", prev.predicted_busbw_fraction if prev else 0.0,
            prev.ecmp_predicted_busbw_fraction if prev else 0.0, p.moved)
        status = Status.OPTIMAL if achieved <= bound + 1e-9 else Status.FEASIBLE
        out[name] = replace(p, summary=summary, status=status)
    return out


def route_of(a: Assignment) -> Route:
    return Route(a.src_node, a.dst_node, a.path, a.udp_sport, a.links, ())
