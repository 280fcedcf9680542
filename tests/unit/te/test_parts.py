"""Independent parts of a batch (issue 18): target jobs that share no switch are planned apart,
each with only its own part's active jobs as background, and nothing about their plans or
summaries changes."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from controller.domain.fabric import Fabric
from controller.domain.jobs import Flow
from controller.te import planner
from controller.te.candidates import for_fabric
from controller.te.config import Config
from controller.te.instance import ActiveJob
from controller.te.parts import Part, apart, split
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine

from .conftest import flows_of, ring

CFG = Config(time_limit_s=20.0, cpsat_time_limit_s=1.0, ecmp_draws=4, parallel_min_flows=1)


def _pods(fabric: Fabric) -> list[list[str]]:
    leaf_of = {p.host: p.switch for p in fabric.ports()}
    pods: dict[str, list[str]] = {}
    for h in sorted(fabric.hosts, key=lambda h: h.name):
        pods.setdefault(leaf_of[h.name].split("-")[0], []).append(h.name)
    return [pods[k] for k in sorted(pods)]


def _fabric() -> Fabric:
    # 2:1 below the core and within each pod (2 spines for 4 leaves), so that plans have to work
    return clos3(Clos3Spec(pods=3, leaves_per_pod=4, spines_per_pod=2, cores=2, hosts_per_leaf=2))


def _job(fabric: Fabric, name: str, hosts: list[str], seed: int, channels: int = 2) -> list[Flow]:
    return flows_of(ring(name, fabric, hosts, channels, 2, seed), fabric)


def _placed(fabric: Fabric, jobs: dict[str, list[Flow]]) -> dict[str, ActiveJob]:
    out: dict[str, ActiveJob] = {}
    for name, plan in planner.plan(fabric, jobs, {}, CFG).items():
        out[name] = ActiveJob(jobs[name], plan.assignments)
    return out


def test_pod_local_jobs_split_by_pod_and_a_job_across_pods_joins_them() -> None:
    fabric = _fabric()
    view = for_fabric(fabric).view
    p0, p1, p2 = _pods(fabric)
    rng = random.Random(3)
    targets = {f"t{i}": _job(fabric, f"t{i}", rng.sample(pod, 4), i) for i, pod in enumerate((p0, p1, p2, p0))}
    # active: a job in pod 1, one in pod 2, and a pending job of pod 0 (no assignments: it joins
    # by its NICs' leaves, whose demand it shares)
    active = _placed(fabric, {"a1": _job(fabric, "a1", p1[:3], 7), "a2": _job(fabric, "a2", p2[2:6], 8)})
    active["pending0"] = ActiveJob(_job(fabric, "pending0", p0[4:7], 9))
    parts = split(view, targets, active)
    assert parts == [Part(("t0", "t3"), ("pending0",)), Part(("t1",), ("a1",)), Part(("t2",), ("a2",))]
    assert apart(view, targets) and not apart(view, {"t0": targets["t0"], "t3": targets["t3"]})

    # An active job across pods 0 and 1 joins their parts (it couples their links' loads)
    across = _placed(fabric, {"x": _job(fabric, "x", [p0[0], p1[0]], 1, channels=1)})
    parts = split(view, targets, {**active, **across})
    assert [p.targets for p in parts] == [("t0", "t1", "t3"), ("t2",)]
    # (the targets alone are apart: only `split` sees the active job that joins two of them)
    assert split(view, {"t0": targets["t0"], "t1": targets["t1"]}, across) == [Part(("t0", "t1"), ("x",))]
    assert apart(view, {"t0": targets["t0"], "t1": targets["t1"]})
    assert set(parts[0].active) == {"pending0", "a1", "x"} and parts[1].active == ("a2",)

    # ... and so does a target across them; an active job no target shares a switch with is
    # left out (the pending one's leaves: y's paths do not cross them)
    parts = split(view, {"y": _job(fabric, "y", [p0[1], p2[1]], 2, channels=1), "t1": targets["t1"]}, active)
    assert parts == [Part(("y",), ("a2",)), Part(("t1",), ("a1",))]


def test_on_a_two_tier_fabric_jobs_across_leaves_are_one_part() -> None:
    fabric = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=2))
    hosts = sorted(h.name for h in fabric.hosts)
    targets = {"a": _job(fabric, "a", hosts[:4], 1), "b": _job(fabric, "b", hosts[4:], 2)}
    view = for_fabric(fabric).view
    assert [p.targets for p in split(view, targets, {})] == [("a", "b")] and not apart(view, targets)
    # two jobs each inside one leaf pair are one part too here (dual-homed NICs: a flow may go
    # from one leaf of the pair to the other through the spines) ...
    local = {"c": _job(fabric, "c", hosts[:2], 3), "d": _job(fabric, "d", hosts[4:6], 4)}
    assert not apart(view, local) and len(split(view, local, {})) == 1
    # ... but with single-homed NICs, two jobs inside one leaf each are two parts
    single = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=2, ports_per_nic=1))
    local = {"c": _job(single, "c", ["host0", "host1"], 3), "d": _job(single, "d", ["host2", "host3"], 4)}
    view = for_fabric(single).view
    assert apart(view, local) and [p.targets for p in split(view, local, {})] == [("c",), ("d",)]


def _here(fabric: Fabric, seen: list[Sequence[planner.PartTask]]) -> planner.PartRunner:
    def run(tasks: Sequence[planner.PartTask]) -> list[dict[str, planner.JobPlan]]:
        seen.append(tasks)
        return planner.plan_parts_here(fabric, tasks)
    return run


def test_a_batch_planned_part_by_part_is_planned_and_summarised_as_in_one_plan() -> None:
    """On an instance where one plan's search, bounds and route windows are not swayed by the
    other parts (this one: greedy placements, bounds met, every route), the parts' plans,
    proven bounds, ECMP figures and simulated rates (each over the part's own active jobs
    only) are those of one plan of the whole batch over every active job; an active job left
    out of its part (its paths ignored by the split) changes them."""
    # thin links to and from the core: flows crossing pods share bottlenecks there
    fabric = clos3(Clos3Spec(pods=4, leaves_per_pod=4, spines_per_pod=2, cores=1, hosts_per_leaf=2,
                             fabric_gbps=100.0))
    leaves: dict[str, list[str]] = {}  # hosts by the pair of leaves they hang off (dual-homed)
    for port in fabric.ports():
        if port.switch.endswith(("leaf0", "leaf2")):
            leaves.setdefault(port.switch, []).append(port.host)
    low = [sorted(set(leaves[f"pod{p}-leaf0"])) for p in range(4)]
    high = [sorted(set(leaves[f"pod{p}-leaf2"])) for p in range(4)]
    rng = random.Random(11)
    background = {f"bg{i}": _job(fabric, f"bg{i}", rng.sample(low[i % 4], 3), 20 + i) for i in range(8)}
    # across pods 0 and 1 from leaves no target uses: it shares only spine-to-core links with
    # the target "y" (its paths, not its NICs, put it in y's part)
    background["across"] = _job(fabric, "across", [high[0][0], high[1][1]], 5)
    active = _placed(fabric, background)
    targets = {f"t{i}": _job(fabric, f"t{i}", rng.sample(low[i % 4], 3), i) for i in range(8)}
    targets["y"] = _job(fabric, "y", [low[0][0], low[1][1]], 6)
    for name, flows in targets.items():
        active[name] = ActiveJob(flows)  # pending, as the service passes them
    whole = planner.plan(fabric, targets, active, CFG)
    seen: list[Sequence[planner.PartTask]] = []
    parted = planner.plan(fabric, targets, active, CFG, runner=_here(fabric, seen))
    assert len(seen) == 1 and [sorted(t.targets) for t in seen[0]] == [
        ["t0", "t1", "t4", "t5", "y"], ["t2", "t6"], ["t3", "t7"]]
    assert {n for n in seen[0][0].active if not n.startswith("t")} == {"bg0", "bg1", "bg4", "bg5", "across", "y"}
    assert sorted(parted) == sorted(whole) == sorted(targets)
    for name in targets:
        a, b = whole[name], parted[name]
        assert a.summary is not None and b.summary is not None
        assert a.assignments == b.assignments, name
        assert dataclasses.replace(a.summary, solve_ms=0) == dataclasses.replace(b.summary, solve_ms=0), name
        assert (a.status, a.moved, a.error) == (b.status, b.moved, b.error)


def test_small_batches_and_one_part_are_planned_in_one_plan() -> None:
    fabric = _fabric()
    pods = _pods(fabric)
    targets = {"a": _job(fabric, "a", pods[0][:4], 1), "b": _job(fabric, "b", pods[1][:4], 2)}
    seen: list[Sequence[planner.PartTask]] = []
    n = sum(len(f) for f in targets.values())
    planner.plan(fabric, targets, {}, dataclasses.replace(CFG, parallel_min_flows=n + 1), runner=_here(fabric, seen))
    planner.plan(fabric, {"a": targets["a"]}, {}, CFG, runner=_here(fabric, seen))
    assert seen == []
    planner.plan(fabric, targets, {}, dataclasses.replace(CFG, parallel_min_flows=n), runner=_here(fabric, seen))
    assert len(seen) == 1 and len(seen[0]) == 2
