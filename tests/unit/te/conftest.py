"""Helpers for the C4P tests: fabrics, jobs, and a plan function that always validates."""

from __future__ import annotations

import random
from collections.abc import Mapping

from controller.domain.fabric import Fabric
from controller.domain.jobs import Flow, JobSpec, Pattern, RankSpec, TrafficSpec
from controller.te import flows as job_flows
from controller.te import planner
from controller.te.candidates import for_fabric
from controller.te.config import Config
from controller.te.instance import ActiveJob
from controller.te.validate import plan_problems

FAST = Config(time_limit_s=2.0, cpsat_time_limit_s=0.5, ecmp_draws=8)


def ring(name: str, fabric: Fabric, hosts: list[str], channels: int = 2, qps: int = 2, seed: int = 0,
         pattern: Pattern = Pattern.RING) -> JobSpec:
    """Per-rail rings over `hosts` in a seeded order (one rank per NIC)."""
    order = list(hosts)
    random.Random(seed).shuffle(order)
    nics = [n.name for n in next(h for h in fabric.hosts if h.name == hosts[0]).nics]
    ranks: list[RankSpec] = []
    traffic = []
    for nic in nics:
        start = len(ranks)
        ranks += [RankSpec(start + i, h, nic) for i, h in enumerate(order)]
        traffic.append(TrafficSpec(pattern, tuple(range(start, len(ranks))), channels=channels, qps_per_connection=qps))
    return JobSpec(name, tuple(ranks), tuple(traffic))


def checked(fabric: Fabric, targets: Mapping[str, list[Flow]], active: Mapping[str, ActiveJob] | None = None,
            config: Config = FAST) -> dict[str, planner.JobPlan]:
    """plan(), then the solver-free validator on every planned job and the bound invariants."""
    out = planner.plan(fabric, targets, active or {}, config)
    view = for_fabric(fabric).view
    for name, p in out.items():
        if p.summary is None:
            continue
        assert plan_problems(view, targets[name], p.assignments) == []
        s = p.summary
        assert s.lower_bound <= s.max_link_utilization + 1e-9, s
        assert s.lower_bound <= s.ecmp_expected_max_utilization + 1e-9, s
        assert 0.0 < s.predicted_busbw_fraction <= 1.0 + 1e-9
    return out





def flows_of(spec: JobSpec, fabric: Fabric) -> list[Flow]:
    assert job_flows.problems(spec, fabric) == []
    return job_flows.derive_flows(spec)
