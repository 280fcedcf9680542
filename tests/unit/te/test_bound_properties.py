"""Property tests of the carry rule, pure: random hand-written fabrics (2 and 3 tiers, peer
links, missing links, mixed capacities, single- and dual-port NICs, irregular names), a few
random jobs planned one after another, then random link downs and ups re-planned as the
service does (`replan_indexed` with the fabric before the change), some summaries refreshed in
between as the service's background refresh does. After every change each
planned job's bound (carried, or the floor that replaces it) is at most its exact optimum on
the new fabric (`tests/support/handmade.exact_optimum`), never above its plan, and every plan
passes the validator. Seeded; a few flows per job so that the exact optimum is quick.
(The service-level sequences, with job posts and deletes, are tests/integration/
test_bound_properties.py.)
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from controller.domain.fabric import LinkState
from controller.domain.jobs import Assignment, Flow, FlowKey, PlanSummary
from controller.te import flows as job_flows
from controller.te import planner
from controller.te.candidates import for_fabric
from controller.te.carry import demand_factor
from controller.te.instance import ActiveJob, count_by_nic, job_demands
from controller.te.replan import replan_indexed
from controller.te.summary import summarize
from controller.te.validate import plan_problems
from controller.topology.build import with_link_state
from controller.topology.graph import FabricView
from tests.support.handmade import exact_optimum, random_fabric, random_job

from .conftest import FAST

CASES = 120
CHANGES = 6


@pytest.mark.parametrize("seed", range(CASES))
def test_bounds_after_link_changes_never_exceed_the_exact_optimum(seed: int) -> None:
    rng = random.Random(1000 + seed)
    fabric = random_fabric(rng)
    flows: dict[str, list[Flow]] = {}
    plans: dict[str, dict[FlowKey, Assignment]] = {}
    summaries: dict[str, PlanSummary] = {}
    for i in range(rng.randint(1, 3)):
        name = f"j{i}"
        flows[name] = job_flows.derive_flows(random_job(rng, fabric, name, max_flows=6))
        active = {n: ActiveJob(flows[n], plans.get(n, {})) for n in flows}
        got = planner.plan(fabric, {name: flows[name]}, active, FAST)[name]
        if got.summary is None:
            del flows[name]
            continue
        # as the service does when the job is posted: its flows lower shared NICs' demands
        alpha = demand_factor(count_by_nic(f for n in plans for f in flows[n]),
                              count_by_nic(f for n in flows for f in flows[n]))
        summaries = {n: replace(s, lower_bound=alpha * s.lower_bound) for n, s in summaries.items()}
        plans[name], summaries[name] = dict(got.assignments), got.summary
    checked = 0
    switch_links = [x.name for x in fabric.links if not x.is_host_link]
    host_links = [x.name for x in fabric.links if x.is_host_link]
    for step in range(CHANGES):
        down = [x.name for x in fabric.links if x.state != LinkState.UP]
        if down and rng.random() < 0.45:
            link, state = rng.choice(down), LinkState.UP
        else:
            used = sorted({x for plan in plans.values() for a in plan.values() for x in a.links} - set(down))
            pool = [n for n in (switch_links if rng.random() < 0.85 else host_links) if n not in down]
            pool = used if used and rng.random() < 0.6 else pool
            if not pool:
                continue
            link, state = rng.choice(pool), rng.choice([LinkState.DOWN, LinkState.DRAINED])
        before, fabric = fabric, with_link_state(fabric, link, state)
        cands = for_fabric(fabric)
        active = {n: ActiveJob(flows[n], plans.get(n, {})) for n in flows}
        result = replan_indexed(fabric, active, cands, summaries, FabricView(before))
        for name, p in result.plans.items():
            if p.summary is None:  # no path any more: the job fails and leaves
                del flows[name], plans[name], summaries[name]
                continue
            assert p.violation is None, (seed, step, p.violation)
            plans[name], summaries[name] = dict(p.assignments), p.summary
        for name, bound in result.bounds.items():
            if name in summaries:
                summaries[name] = replace(summaries[name], lower_bound=bound)
        for name in list(plans):
            if rng.random() < 0.5:  # the service's background refresh: the full bound, now
                _, refreshed, violation = summarize(fabric, cands, {n: ActiveJob(flows[n], plans[n]) for n in plans},
                                                    name, job_demands(fabric, {n: ActiveJob(flows[n]) for n in flows}),
                                                    FAST, 0.0, "refresh")
                assert violation is None
                summaries[name] = refreshed
        for name in plans:
            assert plan_problems(cands.view, flows[name], plans[name]) == [], (seed, step, name)
            opt = exact_optimum(fabric, name, flows, plans)
            assert opt is not None
            where = (seed, step, link, state.value, name, summaries[name], opt)
            assert summaries[name].lower_bound <= opt + 1e-9, where
            checked += 1
    assert checked > 0 or not plans
