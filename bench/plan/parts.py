"""Independent fabric parts (issue 18): one batch of new jobs planned as one plan, part by part
in this thread, and part by part in 2 spawned processes, side by side on several shapes.

    .venv/bin/python -m bench.plan.parts [--repeats 3] [--processes 2]

Per shape: the active jobs (planned first, the same for every column), a batch of new 4-host
ring jobs, how many parts the batch splits into (`te.parts.split`), the wall time of each way
(median of the repeats; the planner's own code in process, no database), and whether every
job's plan and summary is the same in all three (`same`: jobs whose assignments and summary
figures equal the one plan's; `solve_ms` aside, and the name of the bound method in `solver`,
counted apart where it differs). Per job, averaged over the batch (one plan's): c4's
`max_link_utilization`, its proven `lower_bound`, and the ECMP expectation of its flows
(`ecmp_expected_max_utilization`, c4's hash model). Every column plans after a first, untimed
plan of the batch (the candidates' routes computed once, as in the service). Physics: c4's own
planner and its model of ECMP, in process; the parts' processes share the machine's cores with
nothing else of c4.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

from bench.plan.scenarios import hand_written, ring_job, scale_fabric
from controller.domain.fabric import Fabric
from controller.domain.jobs import Flow
from controller.services.plan_pool import PartPool
from controller.te import flows as job_flows
from controller.te import parts, planner
from controller.te.candidates import Candidates, for_fabric
from controller.te.config import Config
from controller.te.instance import ActiveJob
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine

CONFIG = Config(time_limit_s=5.0, cpsat_time_limit_s=2.0, ecmp_simulation_later=True)  # the service's batch


def _groups(fabric: Fabric) -> list[list[str]]:
    """Hosts by pod (their first port's leaf's pod; two-tier fabrics: one group)."""
    pod_of = {s.name: s.pod for s in fabric.switches}
    out: dict[object, set[str]] = {}
    for p in fabric.ports():
        out.setdefault(pod_of.get(p.switch), set()).add(p.host)
    return [sorted(v) for _, v in sorted(out.items(), key=lambda kv: str(kv[0]))]


@dataclasses.dataclass
class Shape:
    name: str
    fabric: Fabric
    active: int
    batch: int
    across: float = 0.0  # share of the jobs whose 4 hosts come from two pods
    channels: int = 1


def _jobs(shape: Shape, prefix: str, n: int, seed: int) -> dict[str, list[Flow]]:
    groups = _groups(shape.fabric)
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        g = groups[i % len(groups)]
        if len(groups) > 1 and rng.random() < shape.across:
            other = groups[(i + 1 + rng.randrange(len(groups) - 1)) % len(groups)]
            hosts = rng.sample(g, 2) + rng.sample(other, 2)
        else:
            hosts = rng.sample(g, 4)
        spec = ring_job(f"{prefix}{i}", shape.fabric, hosts, shape.channels, 2, seed * 1000 + i)
        out[spec.name] = job_flows.derive_flows(spec)
    return out


def _timed(f: Callable[[], dict[str, planner.JobPlan]], repeats: int) -> tuple[float, dict[str, planner.JobPlan]]:
    times, out = [], {}
    for _ in range(repeats):
        t = time.monotonic()
        out = f()
        times.append(time.monotonic() - t)
    return statistics.median(times), out


def _same(a: Mapping[str, planner.JobPlan], b: Mapping[str, planner.JobPlan]) -> str:
    """How many jobs have the same assignments and summary figures (and, where the figures are
    the same, how many of those name another bound method in `solver`: two methods proving the
    same value, a tie the order of floating-point sums breaks)."""
    n = labels = 0
    for name, p in a.items():
        q = b.get(name)
        if (q is not None and p.summary is not None and q.summary is not None and p.assignments == q.assignments
                and dataclasses.replace(p.summary, solve_ms=0, solver="") == dataclasses.replace(q.summary, solve_ms=0,
                                                                                                 solver="")):
            n += 1
            labels += p.summary.solver != q.summary.solver
    return f"{n}/{len(a)}" + (f" ({labels} name another bound)" if labels else "")


def run(shape: Shape, pool: PartPool, repeats: int, revision: int) -> None:
    fabric = shape.fabric
    cands: Candidates = for_fabric(fabric)
    here = pool.runner(revision, fabric, cands)
    active: dict[str, ActiveJob] = {}
    placed = _jobs(shape, "a", shape.active, 1)
    names = list(placed)
    for i in range(0, len(names), 128):
        chunk = {n: placed[n] for n in names[i:i + 128]}
        for n, p in planner.plan(fabric, chunk, active, CONFIG, cands,
                                 runner=lambda ts: planner.plan_parts_here(fabric, ts, cands)).items():
            active[n] = ActiveJob(chunk[n], p.assignments)
    batch = _jobs(shape, "n", shape.batch, 2)
    everyone = {**active, **{n: ActiveJob(f) for n, f in batch.items()}}
    split = parts.split(cands.view, batch, everyone)
    planner.plan(fabric, batch, everyone, CONFIG, cands)  # warm the candidates' routes for every column
    t_one, one = _timed(lambda: planner.plan(fabric, batch, everyone, CONFIG, cands), repeats)
    t_thread, thread = _timed(lambda: planner.plan(fabric, batch, everyone, CONFIG, cands,
                                                   runner=lambda ts: planner.plan_parts_here(fabric, ts, cands)),
                              repeats)
    pool.run(revision, fabric, cands, [planner.PartTask(dict(list(batch.items())[:1]), {}, CONFIG,
                                                         time.monotonic() + 5)] * pool.processes)  # warm workers
    t_proc, proc = _timed(lambda: planner.plan(fabric, batch, everyone, CONFIG, cands, runner=here), repeats)
    flows = sum(len(f) for f in batch.values())
    sums = [p.summary for p in one.values() if p.summary]
    c4 = statistics.mean(s.max_link_utilization for s in sums)
    lb = statistics.mean(s.lower_bound for s in sums)
    ecmp = statistics.mean(s.ecmp_expected_max_utilization for s in sums)
    n_parts = f"{len(split)}" if flows >= CONFIG.parallel_min_flows else f"{len(split)} (not split: < {CONFIG.parallel_min_flows} flows)"
    print(f"| {shape.name} | {len(active)} | {len(batch)} ({flows} flows) | {n_parts} | {t_one:.3f} s | "
          f"{t_thread:.3f} s ({t_one / t_thread:.2f}x) | {t_proc:.3f} s ({t_one / t_proc:.2f}x) | "
          f"{_same(one, thread)}, {_same(one, proc)} | {c4:.3f} / {lb:.3f} / {ecmp:.3f} |",
          flush=True)


def shapes() -> Sequence[Shape]:
    return [
        Shape("clos3 8 pods x 4 leaves x 4 hosts, 4 spines/pod, pod-local jobs",
              clos3(Clos3Spec(pods=8, leaves_per_pod=4, spines_per_pod=4, cores=8, hosts_per_leaf=4)), 200, 128),
        Shape("same, a quarter of the jobs across two pods",
              clos3(Clos3Spec(pods=8, leaves_per_pod=4, spines_per_pod=4, cores=8, hosts_per_leaf=4)), 200, 128,
              across=0.25),
        Shape("clos3 8 pods, 16 spines/pod, 8 NICs per host (per-rail rings)",
              clos3(Clos3Spec(pods=8, leaves_per_pod=2, spines_per_pod=16, cores=16, hosts_per_leaf=4,
                              nics_per_host=8)), 40, 32),
        Shape("clos3 16 pods x 4 leaves x 4 hosts, 2:1 in pods, 2 channels",
              clos3(Clos3Spec(pods=16, leaves_per_pod=4, spines_per_pod=2, cores=8, hosts_per_leaf=4)), 400, 128,
              channels=2),
        Shape("hand-written (MLAG pairs, 3 tiers)", hand_written(), 6, 16, channels=2),
        Shape("leaf-spine 16 leaves x 4 hosts, 8 spines (one part)",
              leaf_spine(LeafSpineSpec(leaves=16, spines=8, hosts_per_leaf=4)), 200, 128),
    ]


def run_large(pool: PartPool, repeats: int, revision: int) -> None:
    """Pod-sized jobs (16,384 flows: per-rail rings over a pod's 32 hosts, 16 channels x 8 QPs),
    one per pod of `scenarios.scale_fabric`: each alone one after the other (what the service's
    batches do without processes: a job over 2,048 flows is a batch of its own), and the four in
    one batch, part by part in this thread and in the processes."""
    fabric = scale_fabric()
    cands = for_fabric(fabric)
    groups = _groups(fabric)
    batch = {}
    for i, g in enumerate(groups):
        spec = ring_job(f"pod{i}", fabric, g, 16, 8, 40 + i)
        batch[spec.name] = job_flows.derive_flows(spec)
    everyone = {n: ActiveJob(f) for n, f in batch.items()}

    def alone() -> dict[str, planner.JobPlan]:
        active = dict(everyone)
        out: dict[str, planner.JobPlan] = {}
        for n, f in batch.items():
            out[n] = planner.plan(fabric, {n: f}, active, CONFIG, cands)[n]
            active[n] = ActiveJob(f, out[n].assignments)
        return out

    alone()  # warm the candidates
    t_one, one = _timed(alone, repeats)
    t_thread, thread = _timed(lambda: planner.plan(fabric, batch, everyone, CONFIG, cands,
                                                   runner=lambda ts: planner.plan_parts_here(fabric, ts, cands)),
                              repeats)
    here = pool.runner(revision, fabric, cands)
    t_proc, proc = _timed(lambda: planner.plan(fabric, batch, everyone, CONFIG, cands, runner=here), repeats)
    sums = [p.summary for p in one.values() if p.summary]
    flows = sum(len(f) for f in batch.values())
    print(f"| {len(batch)} pod-sized jobs, scale fabric (4 pods x 32 hosts x 4 NICs) | {flows} | "
          f"{t_one:.3f} s | {t_thread:.3f} s ({t_one / t_thread:.2f}x) | {t_proc:.3f} s ({t_one / t_proc:.2f}x) | "
          f"{_same(one, thread)}, {_same(one, proc)} | {statistics.mean(s.max_link_utilization for s in sums):.3f} / "
          f"{statistics.mean(s.lower_bound for s in sums):.3f} / "
          f"{statistics.mean(s.ecmp_expected_max_utilization for s in sums):.3f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--large-only", action="store_true", help="only the pod-sized jobs")
    args = ap.parse_args()
    pool = PartPool(args.processes)
    print(f"config: time limit {CONFIG.time_limit_s} s, CP-SAT {CONFIG.cpsat_time_limit_s} s, "
          f"parts split from {CONFIG.parallel_min_flows} flows; {args.processes} processes; median of {args.repeats}")
    print("| shape | active | batch | parts | one plan | parts in this thread | parts in processes | same "
          "(thread, processes) | per job: c4 / bound / ECMP |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for i, shape in enumerate(() if args.large_only else shapes()):
            run(shape, pool, args.repeats, i + 1)
        print()
        print("| large jobs | flows | each alone, one after the other | one batch, parts in this thread | "
              "one batch, parts in processes | same (thread, processes) | per job: c4 / bound / ECMP |")
        print("|---|---|---|---|---|---|---|")
        run_large(pool, args.repeats, 100)
    finally:
        pool.close()


if __name__ == "__main__":
    main()
