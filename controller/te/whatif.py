"""Offline what-if for operators (`c4 plan`): plan one job on a fabric, with chosen links down,
and compare it link by link with what ECMP would do. Pure: values in, values out.

Each `LinkLoad` row is one link direction the job uses under c4 or under ECMP: its capacity,
c4's utilization and ECMP's mean utilization over the sampled draws.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from controller.domain.fabric import Fabric, LinkState
from controller.domain.jobs import JobSpec
from controller.domain.problems import Problem
from controller.te import flows as job_flows
from controller.te import planner
from controller.te.candidates import for_fabric
from controller.te.config import Config
from controller.te.ecmp import EcmpSampler
from controller.te.instance import ActiveJob, build_instance, job_demands, to_route
from controller.te.solution import counts_of_current, loads_gbps
from controller.topology.build import with_link_state


@dataclass(frozen=True, slots=True)
class LinkLoad:
    link: str
    direction: str
    capacity_gbps: float
    c4_utilization: float
    ecmp_utilization: float


@dataclass(frozen=True, slots=True)
class WhatIf:
    plan: planner.JobPlan | None
    links: list[LinkLoad]
    problems: list[Problem]


def what_if(fabric: Fabric, spec: JobSpec, down: Iterable[str] = (), config: Config = Config(),
            on_phase: Callable[[str], None] = lambda _phase: None) -> WhatIf:
    """`on_phase` is told each phase as it starts (the CLI shows it on a terminal)."""
    for name in down:
        fabric = with_link_state(fabric, name, LinkState.DOWN)
    on_phase("checking the job against the fabric")
    found = job_flows.problems(spec, fabric)
    if found:
        return WhatIf(None, [], found)
    flows = job_flows.derive_flows(spec)
    on_phase("finding candidate paths")
    cands = for_fabric(fabric)
    on_phase(f"planning {len(flows)} flows")
    p = planner.plan(fabric, {spec.name: flows}, {}, config, cands)[spec.name]
    if p.summary is None:
        return WhatIf(p, [], [])
    jobs = {spec.name: ActiveJob(flows, p.assignments)}
    current = {(spec.name, k): to_route(cands.view, a) for k, a in p.assignments.items()}
    inst, _ = build_instance(fabric, cands, {spec.name: flows}, job_demands(fabric, jobs), {}, current)
    c4 = loads_gbps(inst, counts_of_current(inst)) / inst.capacity_gbps
    on_phase("comparing with ECMP")
    sampler = EcmpSampler(cands.view, inst, config.seed)
    ecmp = np.mean([loads_gbps(inst, sampler.counts(sampler.draw())) / inst.capacity_gbps
                    for _ in range(config.ecmp_draws)], axis=0)
    rows = [LinkLoad(name, d, float(inst.capacity_gbps[i]), float(c4[i]), float(ecmp[i]))
            for i, (name, d) in enumerate(inst.links) if c4[i] > 0 or ecmp[i] > 0]
    rows.sort(key=lambda r: (-r.c4_utilization, -r.ecmp_utilization, r.link, r.direction))
    return WhatIf(p, rows, [])
