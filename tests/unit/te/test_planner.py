"""Planner properties over scenario data: exact on 2-tier equal demands, near the bound elsewhere.

Every plan goes through `checked`, which runs the solver-free validator and asserts
bound <= achieved and bound <= ECMP's expectation.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from controller.domain.fabric import Fabric, LinkState
from controller.domain.jobs import Pattern
from controller.te.instance import ActiveJob
from controller.te.solution import Status
from controller.topology.build import with_link_state
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine

from .conftest import FAST, checked, flows_of, ring

LS = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=3))
LS_WIDE = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
LS_OVER = leaf_spine(LeafSpineSpec(leaves=6, spines=2, hosts_per_leaf=4, fabric_gbps=200.0))
LS_SINGLE = leaf_spine(LeafSpineSpec(leaves=4, spines=3, hosts_per_leaf=3, ports_per_nic=1))
C3 = clos3(Clos3Spec(pods=3, leaves_per_pod=2, spines_per_pod=2, cores=4, hosts_per_leaf=2))
C3_OVER = clos3(Clos3Spec(pods=3, leaves_per_pod=2, spines_per_pod=2, cores=2, hosts_per_leaf=3))

TWO_TIER_EQUAL = [  # (fabric, channels, qps, seed, pattern)
    (LS, 1, 1, 0, Pattern.RING), (LS, 2, 2, 1, Pattern.RING), (LS, 1, 3, 2, Pattern.RING),
    (LS_WIDE, 2, 2, 3, Pattern.RING), (LS_WIDE, 4, 1, 4, Pattern.RING), (LS_OVER, 2, 2, 5, Pattern.RING),
    (LS_OVER, 1, 3, 6, Pattern.RING), (LS_SINGLE, 1, 2, 7, Pattern.RING), (LS_SINGLE, 2, 3, 8, Pattern.RING),
    (LS, 1, 1, 9, Pattern.ALLTOALL),
    (LS_OVER, 1, 1, 10, Pattern.ALLTOALL), (LS_WIDE, 1, 1, 11, Pattern.ALLTOALL),
]


def hosts(fabric: Fabric) -> list[str]:
    return [h.name for h in fabric.hosts]


@pytest.mark.parametrize(("fabric", "channels", "qps", "seed", "pattern"), TWO_TIER_EQUAL)
def test_two_tier_equal_demands_reach_the_bound(fabric, channels, qps, seed, pattern) -> None:  # type: ignore[no-untyped-def]
    fl = flows_of(ring("j", fabric, hosts(fabric), channels, qps, seed, pattern), fabric)
    s = checked(fabric, {"j": fl})["j"].summary
    assert s is not None
    assert s.max_link_utilization == pytest.approx(s.lower_bound, abs=1e-9), s


def failed(fabric: Fabric, count: int, seed: int) -> Fabric:
    import random

    names = sorted(x.name for x in fabric.links if not x.is_host_link)
    for name in random.Random(seed).sample(names, count):
        fabric = with_link_state(fabric, name, LinkState.DOWN)
    return fabric


GENERAL = [  # (name, fabric, jobs: [(hosts slice, channels, qps)])
    ("clos3", C3, [(slice(None), 2, 2)]),
    ("clos3 over", C3_OVER, [(slice(None), 2, 2)]),
    ("clos3 2 down", failed(C3, 2, 1), [(slice(None), 2, 2)]),
    ("clos3 over 2 down, 3 jobs", failed(C3_OVER, 2, 2), [(slice(0, 9), 2, 2), (slice(9, None), 1, 4), (slice(None, None, 3), 1, 2)]),
    ("leaf-spine over 2 down, 2 jobs", failed(LS_OVER, 2, 3), [(slice(0, 12), 2, 2), (slice(12, None), 2, 1)]),
    ("clos3 3 jobs", C3, [(slice(0, 6), 2, 2), (slice(6, None), 1, 2), (slice(1, None, 2), 2, 1)]),
]


@pytest.mark.parametrize(("name", "fabric", "jobs"), GENERAL)
def test_general_cases_within_five_percent_of_the_bound(name, fabric, jobs) -> None:  # type: ignore[no-untyped-def]
    targets = {f"j{i}": flows_of(ring(f"j{i}", fabric, hosts(fabric)[sl], c, q, i), fabric)
               for i, (sl, c, q) in enumerate(jobs)}
    plans = checked(fabric, targets)
    from controller.te.candidates import for_fabric
    from controller.te.config import Config
    from controller.te.instance import build_instance, job_demands, to_route
    from controller.te.solution import counts_of_current, max_utilization
    from controller.te.summary import proven_bound

    cands = for_fabric(fabric)
    jobs_now = {n: ActiveJob(targets[n], plans[n].assignments) for n in targets}
    current = {(n, k): to_route(cands.view, a) for n, j in jobs_now.items() for k, a in j.assignments.items()}
    inst, _ = build_instance(fabric, cands, targets, job_demands(fabric, jobs_now), {}, current)
    counts = counts_of_current(inst)
    achieved = max_utilization(inst, counts)
    lb, _ = proven_bound(inst, counts, Config(), max(p.joint_bound for p in plans.values()))
    assert lb <= achieved + 1e-9
    assert achieved <= 1.05 * lb, (name, achieved, lb)


@pytest.mark.parametrize("fabric", [LS_WIDE, C3], ids=["leaf-spine", "clos3"])
def test_non_blocking_fabrics_predict_full_bus_bandwidth_and_balanced_ports(fabric) -> None:  # type: ignore[no-untyped-def]
    fl = flows_of(ring("j", fabric, hosts(fabric), 2, 2, 3), fabric)
    p = checked(fabric, {"j": fl})["j"]
    assert p.summary is not None and p.summary.predicted_busbw_fraction >= 0.99
    assert p.summary.ecmp_predicted_busbw_fraction < p.summary.predicted_busbw_fraction
    per_port = Counter(a.src_node for a in p.assignments.values())
    by_nic: dict[str, list[int]] = {}
    for node, n in per_port.items():
        by_nic.setdefault(node.rsplit(":", 1)[0], []).append(n)
    assert all(len(v) == 2 and abs(v[0] - v[1]) <= 1 for v in by_nic.values())


def test_same_input_same_plan() -> None:
    fl = flows_of(ring("j", C3, hosts(C3), 2, 2, 4), C3)
    a, b = checked(C3, {"j": fl})["j"], checked(C3, {"j": fl})["j"]
    assert a.assignments == b.assignments


def test_partitioned_fabric_fails_only_that_job_and_names_the_pair() -> None:
    cut = LS_SINGLE
    for link in LS_SINGLE.links:
        if not link.is_host_link and "leaf3" in (link.a, link.b):
            cut = with_link_state(cut, link.name, LinkState.DOWN)
    far = [h for h in hosts(cut) if h in ("host9", "host10")]
    near = hosts(cut)[:6]
    targets = {"cut": flows_of(ring("cut", cut, near[:2] + far, 1, 1, 0), cut),
               "fine": flows_of(ring("fine", cut, near, 1, 2, 0), cut)}
    plans = checked(cut, targets)
    assert plans["cut"].status == Status.NO_PATH and plans["cut"].assignments == {}
    assert plans["cut"].error is not None and "no path between ranks" in plans["cut"].error
    assert plans["fine"].status in (Status.OPTIMAL, Status.FEASIBLE) and plans["fine"].assignments


def test_other_jobs_are_background_and_stay_put() -> None:
    hs = hosts(LS_WIDE)
    first = flows_of(ring("a", LS_WIDE, hs[:16], 2, 2, 1), LS_WIDE)
    pa = checked(LS_WIDE, {"a": first})["a"]
    second = flows_of(ring("b", LS_WIDE, hs[8:], 2, 2, 2), LS_WIDE)
    pb = checked(LS_WIDE, {"b": second}, {"a": ActiveJob(first, pa.assignments)})["b"]
    assert pb.summary is not None and pb.summary.flows == len(second)
    assert pb.summary.lower_bound <= pb.summary.max_link_utilization + 1e-9


def test_brute_force_optimum_lies_between_bound_and_plan() -> None:
    """On a tiny instance every assignment is enumerated: bound <= optimum <= plan, plan == optimum."""
    from controller.te.candidates import for_fabric
    from controller.te.instance import build_instance, job_demands
    from controller.te.solution import max_utilization

    fabric = leaf_spine(LeafSpineSpec(leaves=2, spines=2, hosts_per_leaf=1, ports_per_nic=1, fabric_gbps=100.0))
    fl = flows_of(ring("j", fabric, hosts(fabric), 1, 3, 0), fabric)
    p = checked(fabric, {"j": fl})["j"]
    assert p.summary is not None
    cands = for_fabric(fabric)
    inst, _ = build_instance(fabric, cands, {"j": fl}, job_demands(fabric, {"j": ActiveJob(fl)}), {})
    import numpy as np

    best = float("inf")
    sizes = [len(g.routes) for g in inst.groups]
    for choice in itertools.product(*[list(itertools.combinations_with_replacement(range(s), len(g.flows)))
                                      for s, g in zip(sizes, inst.groups, strict=True)]):
        counts = [np.bincount(np.array(c, dtype=np.int64), minlength=s).astype(np.int64) for c, s in zip(choice, sizes, strict=True)]
        best = min(best, max_utilization(inst, counts))
    assert p.summary.lower_bound <= best + 1e-9
    assert p.summary.max_link_utilization == pytest.approx(best)


@pytest.mark.parametrize("budget", [0, 4, 1000])
def test_global_reoptimisation_respects_the_move_budget(budget: int) -> None:
    from controller.te.config import Config

    fabric = failed(C3_OVER, 2, 5)
    hs = hosts(fabric)
    a = flows_of(ring("a", fabric, hs[:12], 2, 2, 1), fabric)
    b = flows_of(ring("b", fabric, hs[6:], 2, 2, 2), fabric)
    pa = checked(fabric, {"a": a})["a"]
    pb = checked(fabric, {"b": b}, {"a": ActiveJob(a, pa.assignments)})["b"]
    active = {"a": ActiveJob(a, pa.assignments), "b": ActiveJob(b, pb.assignments)}
    before = max(pa.summary.max_link_utilization, pb.summary.max_link_utilization)  # type: ignore[union-attr]
    again = checked(fabric, {"a": a, "b": b}, active, Config(move_budget=budget, ecmp_draws=4))
    assert sum(p.moved for p in again.values()) <= budget
    after = max(p.summary.max_link_utilization for p in again.values())  # type: ignore[union-attr]
    assert after <= before + 1e-9
    if budget == 0:
        assert all(p.moved == 0 for p in again.values())


@pytest.mark.parametrize("fabric", [LS_WIDE, C3], ids=["leaf-spine", "clos3"])
def test_a_large_instance_offers_some_paths_and_proves_its_bound_over_all(fabric) -> None:  # type: ignore[no-untyped-def]
    """Past `max_routes` each port pair offers a rotating window of its paths, whose source
    ports are looked up only for the routes chosen; the plan still validates (`checked`), and
    its bound is computed over every path of the fabric, so it is never above the optimum
    over all paths (here: at most the full instance's plan, and its own plan)."""
    from dataclasses import replace

    from controller.te.candidates import for_fabric
    from controller.te.instance import build_instance, job_demands

    fl = flows_of(ring("j", fabric, hosts(fabric), 1, 1, 12, Pattern.ALLTOALL), fabric)
    small = replace(FAST, max_routes=4 * len(fl))
    inst, _ = build_instance(fabric, for_fabric(fabric), {"j": fl}, job_demands(fabric, {"j": ActiveJob(fl)}), {},
                             max_routes=small.max_routes)
    assert not inst.complete and sum(len(g.routes) for g in inst.groups) <= small.max_routes + len(fl)
    lazy = checked(fabric, {"j": fl}, config=small)["j"].summary
    full = checked(fabric, {"j": fl})["j"].summary
    assert lazy is not None and full is not None
    assert lazy.lower_bound <= full.max_link_utilization + 1e-9
    assert lazy.max_link_utilization <= 1.05 * full.max_link_utilization
    assert "bound=nic" in lazy.solver or "dual over all paths" in lazy.solver
