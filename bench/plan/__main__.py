"""Run the planner benchmarks and print c4, ECMP and a one-pass greedy against the bound.

    .venv/bin/python -m bench.plan              # quality table, scale series, all-to-all series
    .venv/bin/python -m bench.plan --quick      # quality table only
    .venv/bin/python -m bench.plan --alltoall   # all-to-all series only

Quality rows plan all jobs of a scenario jointly (the global optimisation; for one job it is
the job's own plan). `bound` is the proven lower bound of the joint instance (GLOP duals,
NIC pigeonhole, integrality); every ratio divides by it. busbw is the max-min fair
simulator's bus-bandwidth fraction of the slowest flow (1.0 = ideal), c4 vs one ECMP draw.
The scale series times one ring job from its spec to a validated plan (pure planner, no
database, garbage collector paused as the service pauses it; `python -m bench.plan.api` times
the same through the API), then one link failure under it: candidates inherited from the
plan's and the plan's `PlanIndex` (built after the plan, as the service's worker does) passed
in, as the service does; `no index` is the same re-plan indexing every flow itself;
`valid ms` is the solver-free validator on the plan (the service runs it before storing).
The all-to-all series plans the MoE pattern (every ordered pair of ranks, one flow each) of
64, 128 and 256 ranks on non-blocking leaf-spine and clos3 fabrics (`scenarios.alltoall_*`)
with the service's deadline (5 s): wall and CPU time (the box is shared), c4, the bound
and ECMP. Every plan goes through the validator.
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from bench.plan.scenarios import (
    ALLTOALL_RANKS,
    SCALE_SERIES,
    Scenario,
    alltoall_fabric,
    alltoall_job,
    quality,
    scale_fabric,
    scale_job,
)
from controller.domain.fabric import LinkState
from controller.te import ecmp, flows, planner, search, simulate
from controller.te.candidates import for_fabric
from controller.te.config import Config
from controller.te.instance import ActiveJob, build_instance, job_demands, to_route
from controller.te.replan import index_plans, replan_indexed
from controller.te.solution import counts_of_current, max_utilization
from controller.te.summary import _classes, proven_bound
from controller.te.validate import plan_problems
from controller.topology.build import with_link_state


def joint(sc: Scenario, config: Config) -> dict[str, float | str]:
    targets = {name: flows.derive_flows(spec) for name, spec in sc.jobs}
    cands = for_fabric(sc.fabric)
    t0 = time.monotonic()
    plans = planner.plan(sc.fabric, targets, {}, config, cands)
    solve_s = time.monotonic() - t0
    for name, p in plans.items():
        bad = plan_problems(cands.view, targets[name], p.assignments)
        assert not bad, bad[:3]
    jobs = {n: ActiveJob(targets[n], plans[n].assignments) for n in targets}
    demand = job_demands(sc.fabric, jobs)
    current = {(n, k): to_route(cands.view, a) for n, j in jobs.items() for k, a in j.assignments.items()}
    inst, _ = build_instance(sc.fabric, cands, targets, demand, {}, current)
    counts = counts_of_current(inst)
    c4 = max_utilization(inst, counts)
    lb, how = proven_bound(inst, counts, config, max(p.joint_bound for p in plans.values()))
    naive = max_utilization(inst, search.greedy(inst).counts)
    sampler = ecmp.EcmpSampler(cands.view, inst, config.seed)
    draws = [sampler.draw() for _ in range(config.ecmp_draws)]
    ecmp_max = float(np.mean([sampler.max_utilization(c) for c in draws]))
    joint_job = {"": ActiveJob([f for n in sorted(targets) for f in targets[n]], {})}
    cl, _, caps = _classes(sc.fabric, cands, joint_job, demand, "", (inst, counts))
    c4_bw = simulate.busbw_fraction(cl, simulate.max_min_rates(cl, caps), np.arange(len(cl.count)))
    cl2, mem2, caps2 = _classes(sc.fabric, cands, joint_job, demand, "", (inst, sampler.counts(draws[0])))
    ecmp_bw = simulate.busbw_fraction(cl2, simulate.max_min_rates(cl2, caps2), mem2)
    return {"flows": inst.n_flows, "bound": lb, "how": how, "c4": c4, "ecmp": ecmp_max, "naive": naive,
            "c4_bw": c4_bw, "ecmp_bw": ecmp_bw, "solve_s": solve_s,
            "solver": next(iter(plans.values())).summary.solver.split(";")[0]}  # type: ignore[union-attr]


def print_quality(config: Config) -> None:
    print(f"{'scenario':34} {'flows':>6} {'bound':>6} {'c4/lb':>6} {'ecmp/lb':>7} {'greedy/lb':>9} "
          f"{'busbw c4':>8} {'busbw ecmp':>10} {'solve s':>7}  solver")
    for sc in quality():
        r = joint(sc, config)
        lb = float(r["bound"])
        print(f"{sc.name:34} {r['flows']:>6} {lb:>6.3f} {float(r['c4']) / lb:>6.3f} {float(r['ecmp']) / lb:>7.3f} "
              f"{float(r['naive']) / lb:>9.3f} {float(r['c4_bw']):>8.3f} {float(r['ecmp_bw']):>10.3f} "
              f"{float(r['solve_s']):>7.3f}  {r['solver']} (bound: {r['how']})")


def print_scale(config: Config) -> None:
    fabric = scale_fabric()
    print(f"\n{'hosts':>5} {'flows':>6} {'plan s':>7} {'valid ms':>8} {'c4 max':>6} {'bound':>6} {'ecmp':>6} "
          f"{'replan ms':>9} {'no index':>8} {'moved':>5}")
    for n_hosts, channels, qps in SCALE_SERIES:
        spec = scale_job(fabric, n_hosts, channels, qps)
        gc.disable()  # as the service plans (`services.planning._gc_paused`)
        t0 = time.monotonic()
        assert not flows.problems(spec, fabric)
        fl = flows.derive_flows(spec)
        cands = for_fabric(fabric)
        p = planner.plan(fabric, {"big": fl}, {}, config, cands)["big"]
        plan_s = time.monotonic() - t0
        t_valid = time.monotonic()
        assert not plan_problems(cands.view, fl, p.assignments)
        valid_ms = (time.monotonic() - t_valid) * 1000
        gc.enable()
        used = sorted({name for a in p.assignments.values() for name in a.links[1:-1]})
        s0 = p.summary
        assert s0 is not None
        failed = with_link_state(fabric, used[len(used) // 2], LinkState.DOWN)
        active = {"big": ActiveJob(fl, p.assignments)}
        index = index_plans(cands.view, active, job_demands(fabric, active))
        times = []
        for kept in (index, None):
            gc.collect()
            gc.disable()  # as the service's link hook runs
            t1 = time.monotonic()
            after_cands = for_fabric(failed)
            after_cands.inherit(cands)  # as the service does: untouched port pairs keep their ports
            re = replan_indexed(failed, active, after_cands, {"big": s0}, cands.view, index=kept).plans
            times.append((time.monotonic() - t1) * 1000)
            gc.enable()
            after = re["big"]
            assert not plan_problems(for_fabric(failed).view, fl, after.assignments)
        s = p.summary
        assert s is not None
        print(f"{n_hosts:>5} {len(fl):>6} {plan_s:>7.2f} {valid_ms:>8.0f} {s.max_link_utilization:>6.3f} "
              f"{s.lower_bound:>6.3f} {s.ecmp_expected_max_utilization:>6.3f} {times[0]:>9.0f} {times[1]:>8.0f} "
              f"{after.moved:>5}")


def print_alltoall(config: Config) -> None:
    print(f"\n{'fabric':10} {'ranks':>5} {'flows':>6} {'plan s':>6} {'cpu s':>5} {'c4 max':>6} {'bound':>6} "
          f"{'c4/lb':>6} {'ecmp/lb':>7}  solver")
    for kind in ("leaf-spine", "clos3"):
        for ranks in ALLTOALL_RANKS:
            fabric = alltoall_fabric(kind, ranks)
            spec = alltoall_job(fabric, ranks)
            gc.disable()
            t0, c0 = time.monotonic(), time.process_time()
            fl = flows.derive_flows(spec)
            cands = for_fabric(fabric)
            p = planner.plan(fabric, {"moe": fl}, {}, config, cands)["moe"]
            wall, cpu = time.monotonic() - t0, time.process_time() - c0
            gc.enable()
            assert not plan_problems(cands.view, fl, p.assignments)
            s = p.summary
            assert s is not None
            print(f"{kind:10} {ranks:>5} {len(fl):>6} {wall:>6.2f} {cpu:>5.2f} {s.max_link_utilization:>6.3f} "
                  f"{s.lower_bound:>6.3f} {s.max_link_utilization / s.lower_bound:>6.3f} "
                  f"{s.ecmp_expected_max_utilization / s.lower_bound:>7.3f}  {s.solver}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--alltoall", action="store_true")
    args = ap.parse_args()
    config = Config()
    if args.alltoall:
        print_alltoall(Config(time_limit_s=5.0, cpsat_time_limit_s=2.0))
        return
    print_quality(config)
    if not args.quick:
        print_scale(config)
        print_alltoall(Config(time_limit_s=5.0, cpsat_time_limit_s=2.0))


if __name__ == "__main__":
    main()
