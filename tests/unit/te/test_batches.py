"""Planning many jobs at once (issue 18): the shared count of every job's flows
(`summary.LoadBook`) gives exactly the summaries computed job by job, a batch plan is valid
and proven like single plans, and a joint re-plan re-summarises only the jobs it moved."""

from __future__ import annotations

import random
from dataclasses import replace

from controller.domain.jobs import JobSpec, Pattern, RankSpec, TrafficSpec
from controller.te import planner
from controller.te.candidates import for_fabric
from controller.te.instance import ActiveJob, job_demands
from controller.te.summary import LoadBook, summarize
from controller.topology.generate import LeafSpineSpec, leaf_spine

from .conftest import FAST, checked, flows_of

# For tests whose assertions need the plans to finish their search (the maxima they reach, no
# joint re-plan skipped for lack of time): FAST's 2 s deadline can pass on a loaded machine.
# These instances are proven optimal early, so the plans take well under a second anyway.
ROOMY = replace(FAST, time_limit_s=60.0)


def _small(name: str, hosts: list[int]) -> JobSpec:
    ranks = tuple(RankSpec(r, f"host{h}", "mlx5_0") for r, h in enumerate(hosts))
    return JobSpec(name, ranks, (TrafficSpec(Pattern.RING, tuple(range(len(hosts))), channels=1,
                                             qps_per_connection=2),))


def _jobs(fabric, n: int, seed: int) -> dict[str, list]:  # type: ignore[no-untyped-def, type-arg]
    rng = random.Random(seed)
    hosts = len(fabric.hosts)
    return {f"j{i}": flows_of(_small(f"j{i}", rng.sample(range(hosts), 4)), fabric) for i in range(n)}


def test_summaries_from_the_shared_count_equal_those_computed_job_by_job() -> None:
    fabric = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
    cands = for_fabric(fabric)
    targets = _jobs(fabric, 12, 1)
    out = checked(fabric, targets)
    jobs = {n: ActiveJob(f, out[n].assignments) for n, f in targets.items()}
    demand = job_demands(fabric, jobs)
    book = LoadBook(fabric, cands.view, jobs, demand)
    for name in jobs:
        _, alone, v1 = summarize(fabric, cands, jobs, name, demand, FAST, 0.0, "x")
        _, shared, v2 = summarize(fabric, cands, jobs, name, demand, FAST, 0.0, "x", book=book)
        assert v1 is None and v2 is None
        # the background sums may differ in the last bit (another order of addition): to 1e-12
        for field in ("flows", "max_link_utilization", "lower_bound", "ecmp_expected_max_utilization",
                      "predicted_busbw_fraction", "ecmp_predicted_busbw_fraction"):
            assert abs(float(getattr(alone, field)) - float(getattr(shared, field))) <= 1e-12, (name, field)


def test_a_batch_is_planned_valid_and_proven_and_no_worse_than_one_by_one() -> None:
    fabric = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
    background = _jobs(fabric, 20, 2)
    first = checked(fabric, background)
    active = {n: ActiveJob(f, first[n].assignments) for n, f in background.items()}
    batch = {f"n{k}": f for k, f in enumerate(_jobs(fabric, 16, 3).values())}
    together = checked(fabric, batch, active)  # validator and bound invariants inside
    assert set(together) == set(batch) and all(p.summary is not None for p in together.values())
    one_by_one = dict(active)
    for name, flows in batch.items():
        got = checked(fabric, {name: flows}, one_by_one)
        one_by_one[name] = ActiveJob(flows, got[name].assignments)
    view = for_fabric(fabric).view
    joint = {**active, **{n: ActiveJob(f, together[n].assignments) for n, f in batch.items()}}
    assert (planner.fabric_max(view, joint, job_demands(fabric, joint))
            <= planner.fabric_max(view, one_by_one, job_demands(fabric, one_by_one)) + 1e-9)


def test_a_joint_replan_summarises_only_the_jobs_it_moved() -> None:
    fabric = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
    jobs = _jobs(fabric, 10, 4)
    first = checked(fabric, jobs)
    active = {n: ActiveJob(f, first[n].assignments) for n, f in jobs.items()}
    again = planner.plan(fabric, jobs, active, FAST, lazy=set(jobs))
    for name, p in again.items():  # left out: exactly the jobs whose every flow stayed
        assert p.assignments != active[name].assignments and p.summary is not None
    assert len(again) < len(jobs)  # a warm start from the plan keeps most jobs where they are


def test_a_jobs_background_from_the_book_is_every_directions_sum_without_it() -> None:
    """`LoadBook.background` sums every job's load once and re-sums only the directions the
    job uses (issue 18: it used to pass over every direction and demand for every job): the
    same floats, bit for bit, as the pass over every direction."""
    fabric = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
    cands = for_fabric(fabric)
    targets = _jobs(fabric, 16, 5)
    out = checked(fabric, targets)
    jobs = {n: ActiveJob(f, out[n].assignments) for n, f in targets.items()}
    jobs["unplanned"] = ActiveJob(flows_of(_small("unplanned", [0, 5, 9, 13]), fabric))
    book = LoadBook(fabric, cands.view, jobs, job_demands(fabric, jobs))
    for name in jobs:
        own = book.links[name]
        want: dict = {}  # type: ignore[type-arg]
        for (x, dem), n in book.total_links.items():
            if n - own.get((x, dem), 0):
                want[x] = want.get(x, 0.0) + dem * (n - own.get((x, dem), 0))
        assert book.background(name) == want


def test_a_batch_may_leave_its_ecmp_simulations_to_the_refresh_and_nothing_else() -> None:
    """`Config.ecmp_simulation_later` (issue 18: the ECMP draws' max-min simulations run over
    every active flow, per job): a batch's summaries come without `ecmp_predicted_busbw_fraction`
    (None), every other figure exactly what the full summary of the same plan gives (the
    refresh's, which fills it); a plan of one job still computes it."""
    fabric = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
    cands = for_fabric(fabric)
    background = _jobs(fabric, 12, 5)
    first = checked(fabric, background)
    active = {n: ActiveJob(f, first[n].assignments) for n, f in background.items()}
    later = replace(FAST, ecmp_simulation_later=True)
    batch = {f"n{k}": f for k, f in enumerate(_jobs(fabric, 6, 6).values())}
    got = checked(fabric, batch, active, later)  # validator and bound invariants inside
    jobs = {**active, **{n: ActiveJob(f, got[n].assignments) for n, f in batch.items()}}
    demand = job_demands(fabric, jobs)
    book = LoadBook(fabric, cands.view, jobs, demand)
    for name in batch:
        deferred = got[name].summary
        assert deferred is not None and deferred.ecmp_predicted_busbw_fraction is None
        _, full, _ = summarize(fabric, cands, jobs, name, demand, FAST, 0.0, "refresh", book=book)
        assert full.ecmp_predicted_busbw_fraction is not None and 0.0 < full.ecmp_predicted_busbw_fraction <= 1.0
        for field in ("flows", "max_link_utilization", "lower_bound", "ecmp_expected_max_utilization",
                      "predicted_busbw_fraction", "paths_known"):
            assert getattr(deferred, field) == getattr(full, field), (name, field)
    one = checked(fabric, {"solo": next(iter(batch.values()))}, active, later)["solo"].summary
    assert one is not None and one.ecmp_predicted_busbw_fraction is not None


def _pair(name: str, a: int, b: int) -> JobSpec:
    return _small(name, [a, b])


def test_no_joint_replan_when_a_nics_incoming_demand_forces_the_fabric_maximum(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`plan_global` re-plans every job jointly (a plan over all the active flows: it grows
    with the active jobs) only when the fabric-wide maximum is above what the NICs force. A
    NIC that receives more than its ports carry forces it too (issue 18: at 1,000 active ring
    jobs on the bench's fabric the maximum is exactly that): no joint re-plan then, and the
    result is the first plan's, as the joint one could never have been kept."""
    fabric = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
    cands = for_fabric(fabric)
    fan_in = {f"f{i}": flows_of(_pair(f"f{i}", i, 0), fabric) for i in range(1, 5)}  # four hosts into host0
    first = checked(fabric, fan_in, config=ROOMY)
    active = {n: ActiveJob(f, first[n].assignments) for n, f in fan_in.items()}
    new = {"n": flows_of(_small("n", [8, 12, 16, 20]), fabric)}
    demand = job_demands(fabric, {**active, **{n: ActiveJob(f) for n, f in new.items()}})
    into = sum(demand[f.src] for j in active.values() for f in j.flows if f.dst == ("host0", "mlx5_0"))
    forced = into / sum(cands.view.ports[p].capacity_gbps for p in cands.up_ports(("host0", "mlx5_0")))
    calls: list[int] = []
    real = planner.plan

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(len(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "plan", counted)
    got = planner.plan_global(fabric, new, active, ROOMY, cands, budget=256)
    assert calls == [1]  # the new job's plan only
    after = {**active, "n": ActiveJob(new["n"], got["n"].assignments)}
    top = planner.fabric_max(cands.view, after, job_demands(fabric, after))
    assert forced > 1.5 and abs(top - forced) < 1e-9  # the maximum is the NIC's incoming demand
    assert abs(planner._joint_pigeonhole(cands, after, job_demands(fabric, after)) - forced) < 1e-9


def _compositions(n: int, parts: int):  # type: ignore[no-untyped-def]
    if parts == 1:
        yield (n,)
        return
    for k in range(n + 1):
        for rest in _compositions(n - k, parts - 1):
            yield (k, *rest)


def test_the_receive_bound_is_below_every_plan_and_spares_cp_sat_when_it_is_the_maximum(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`bound.receive_bound` (a NIC's incoming demand water-filled over its last links, on
    their background) is at most the best plan's maximum over the links used (every plan of
    a small instance enumerated), and reaches it when the NIC forces it; then the planner's
    quick bound says so and CP-SAT is not run (issue 18: it ran to its limit per batch, its
    result kept only if the maximum fell, which it cannot)."""
    import itertools

    import numpy as np

    from controller.te import bound, cpsat
    from controller.te.instance import build_instance
    from controller.te.solution import max_utilization

    fabric = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=2))
    cands = for_fabric(fabric)
    into = {f"f{i}": [f for f in flows_of(_pair(f"f{i}", i, 0), fabric) if f.dst == ("host0", "mlx5_0")]
            for i in (1, 2, 5)}
    demand = {("host1", "mlx5_0"): 100.0, ("host2", "mlx5_0"): 150.0, ("host5", "mlx5_0"): 60.0}
    for extra in (0.0, 120.0, 390.0):  # background on one of host0's incoming links
        probe, _ = build_instance(fabric, cands, into, demand, {})
        last = sorted({r.directed[-1] for g in probe.groups for r in g.routes})
        inst, _ = build_instance(fabric, cands, into, demand, {last[0]: extra} if extra else {})
        best = min(max_utilization(inst, [np.array(c, dtype=np.int64) for c in combo], only_used=True)
                   for combo in itertools.product(*[list(_compositions(len(g.flows), len(g.routes)))
                                                    for g in inst.groups]))
        got = bound.receive_bound(inst)
        assert 0.0 < got <= best + 1e-12, (extra, got, best)
    # four hosts' jobs planned into host0, then two more jobs into it: the batch's maximum is
    # host0's incoming demand on top of the background, which the other quick bounds miss
    fan_in = {f"f{i}": flows_of(_pair(f"f{i}", i, 0), fabric) for i in range(1, 5)}
    first = planner.plan(fabric, fan_in, {}, ROOMY, cands)
    active = {n: ActiveJob(f, first[n].assignments) for n, f in fan_in.items()}
    new = {"n": flows_of(_small("n", [5, 0, 6, 7]), fabric), "m": flows_of(_pair("m", 6, 0), fabric)}
    called: list[int] = []
    real = cpsat.solve
    monkeypatch.setattr(cpsat, "solve", lambda *a, **k: (called.append(1), real(*a, **k))[1])
    got = planner.plan(fabric, new, active, ROOMY, cands)
    assert not called  # the maximum is proven optimal before CP-SAT
    assert {n: p.summary.max_link_utilization for n, p in got.items() if p.summary} == {"n": 5.5, "m": 5.5}


def test_a_summarys_bound_counts_what_the_receiving_nic_forces() -> None:
    """A complete instance's summary bound (`summary.proven_bound`: every equal-cost path, the
    other jobs' flows where they are) takes `bound.receive_bound` too. Random backgrounds on
    the job's links, multiples of 25 Gbit/s (the lift to the next achievable value included),
    every plan of the job enumerated: the bound is never above the best plan. Where other jobs
    converge on a NIC it is that plan's maximum: the best of the dual, NIC and LP bounds there
    was 3.25 (3.0) for 5.5, and the summaries said feasible, not optimal."""
    import itertools

    import numpy as np

    from controller.te.instance import build_instance
    from controller.te.solution import Status, max_utilization
    from controller.te.summary import proven_bound

    fabric = leaf_spine(LeafSpineSpec(leaves=2, spines=1, hosts_per_leaf=2))  # 2 ports a NIC: 4 routes a pair
    cands = for_fabric(fabric)
    flows = flows_of(_small("j", [2, 0, 3]), fabric)
    demand = job_demands(fabric, {"j": ActiveJob(flows)})
    probe, _ = build_instance(fabric, cands, {"j": flows}, demand, {})
    assert probe.complete
    plans = [[np.array(c, dtype=np.int64) for c in combo]
             for combo in itertools.product(*[list(_compositions(len(g.flows), len(g.routes))) for g in probe.groups])]
    rng = random.Random(7)
    by_receive = 0
    for _ in range(25):
        bg = {d: 25.0 * rng.randint(1, 14) for d in rng.sample(probe.links, rng.randint(1, len(probe.links)))}
        inst, _ = build_instance(fabric, cands, {"j": flows}, demand, bg)
        best = min(max_utilization(inst, c, only_used=True) for c in plans)
        got, how = proven_bound(inst, plans[0], FAST)
        assert got <= best + 1e-9, (bg, got, how, best)
        by_receive += how == "receive"
    assert by_receive  # (the receive bound was the best of them in some of the cases)
    # the fan-in of `test_the_receive_bound_is_below_every_plan...`: now proven optimal
    fabric = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=2))
    cands = for_fabric(fabric)
    fan_in = {f"f{i}": flows_of(_pair(f"f{i}", i, 0), fabric) for i in range(1, 5)}
    first = planner.plan(fabric, fan_in, {}, ROOMY, cands)
    active = {n: ActiveJob(f, first[n].assignments) for n, f in fan_in.items()}
    new = {"n": flows_of(_small("n", [5, 0, 6, 7]), fabric), "m": flows_of(_pair("m", 6, 0), fabric)}
    got_plans = checked(fabric, new, active, ROOMY)
    for name, p in got_plans.items():
        assert p.summary is not None and p.status == Status.OPTIMAL, name
        assert p.summary.lower_bound == p.summary.max_link_utilization == 5.5 and "bound=receive" in p.summary.solver
