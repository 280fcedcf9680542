"""Independent fabric parts planned in parallel processes (issue 18): a batch of new jobs in
separate pods is planned by `C4_PLAN_PROCESSES` spawned processes, with the same plans and
summaries as the planner thread gives them, and a planning process that dies costs nothing but
time (that batch is planned in the planner's process, the next one in a fresh pool).
Planner steps are run by the test (the worker is not started); SQLite (the pool never touches
the database)."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from controller.domain.jobs import JobSpec, Pattern, RankSpec, TrafficSpec
from controller.services import jobs, planning, topology
from controller.services.plan_pool import PartPool
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store.migrate import upgrade
from controller.te import flows as te_flows
from controller.te import planner as te_planner
from controller.te.candidates import for_fabric
from controller.te.config import Config
from controller.te.instance import ActiveJob
from controller.te.validate import plan_problems
from controller.topology.generate import Clos3Spec, clos3
from tests.integration.test_global_planning import _stored

FABRIC = clos3(Clos3Spec(pods=4, leaves_per_pod=4, spines_per_pod=2, cores=2, hosts_per_leaf=2))


def _pod_jobs(prefix: str, seed: int, per_pod: int = 3) -> list[JobSpec]:
    """Rings of 4 ranks inside one pod each, `per_pod` per pod (32 flows each)."""
    leaf_of = {p.host: p.switch for p in FABRIC.ports()}
    pods: dict[str, list[str]] = {}
    for h in sorted({h.name for h in FABRIC.hosts}):
        pods.setdefault(leaf_of[h].split("-")[0], []).append(h)
    rng = random.Random(seed)
    out = []
    for i in range(per_pod):
        for pod in sorted(pods):
            hosts = rng.sample(pods[pod], 4)
            ranks = tuple(RankSpec(j, h, "mlx5_0") for j, h in enumerate(hosts))
            out.append(JobSpec(f"{prefix}{pod}-{i}", ranks, (TrafficSpec(Pattern.RING, (0, 1, 2, 3), channels=4, qps_per_connection=2),)))
    return out


def _runtime(tmp_path: Path, processes: int) -> tuple[Runtime, planning.Planner]:
    url = f"sqlite:///{tmp_path / f'c4-{processes}.db'}"
    upgrade(url)
    rt = Runtime.from_settings(Settings(database_url=url, data_dir=tmp_path, plan_time_limit_s=30.0,
                                        reoptimize_interval_s=3600, plan_processes=processes))
    planner = planning.install(rt)
    topology.replace(rt, FABRIC)
    return rt, planner


def _parts(where: str) -> float:
    return REGISTRY.get_sample_value("c4_planner_parts_total", {"where": where}) or 0.0


def _plans(rt: Runtime) -> dict[str, Any]:
    out = {}
    for j in jobs.list_jobs(rt):
        assert j["status"] == "planned", j
        plan = dict(j["plan"])
        plan.pop("solve_ms")
        out[j["name"]] = plan
    return out


def _checked(rt: Runtime) -> None:
    view = for_fabric(FABRIC).view
    for name, job in _stored(rt).items():
        assert plan_problems(view, job.flows, job.assignments) == [], name
        plan = jobs.get(rt, name)["plan"]
        assert plan["lower_bound"] <= plan["max_link_utilization"] + 1e-9


def test_pods_planned_in_processes_as_in_the_planner_thread(tmp_path: Path) -> None:
    rt, planner = _runtime(tmp_path, 2)
    here, planner_here = _runtime(tmp_path, 0)
    try:
        for spec in _pod_jobs("a", 1):
            jobs.create(rt, spec)
            jobs.create(here, spec)
        before = _parts("processes"), _parts("this_process")
        planner.step()
        assert _parts("processes") - before[0] == 4  # one part per pod, in the pool
        planner_here.step()
        assert _parts("this_process") - before[1] == 4  # the same parts in the planner's thread
        _checked(rt)
        assert _plans(rt) == _plans(here)
        stored, stored_here = _stored(rt), _stored(here)
        assert {n: j.assignments for n, j in stored.items()} == {n: j.assignments for n, j in stored_here.items()}

        # A planning process dies: the next batch is planned here, the one after in a fresh pool
        pool = planner.parts._pool
        assert pool is not None
        for pid in list(pool._processes):  # (the executor's own table of its workers)
            os.kill(pid, signal.SIGKILL)
        for spec in _pod_jobs("b", 2, per_pod=2):
            jobs.create(rt, spec)
        before = _parts("processes"), _parts("this_process")
        planner.step()
        assert (_parts("processes") - before[0], _parts("this_process") - before[1]) == (0, 4)
        for spec in _pod_jobs("c", 3, per_pod=2):
            jobs.create(rt, spec)
        planner.step()
        assert _parts("processes") - before[0] == 4
        assert planner.parts._pool is not pool
        _checked(rt)
        assert len(_plans(rt)) == 12 + 8 + 8
    finally:
        planner.parts.close()
        rt.engine.dispose()
        here.engine.dispose()


def test_large_jobs_of_different_pods_are_batched_together_one_per_process(tmp_path: Path) -> None:
    """A job larger than a batch's flows is planned alone; with planning processes, large jobs
    of different pods share a batch (one per process), so they are planned side by side."""
    rt, planner = _runtime(tmp_path, 2)
    here, planner_here = _runtime(tmp_path, 0)
    try:
        leaf_of = {p.host: p.switch for p in FABRIC.ports()}
        pods: dict[str, list[str]] = {}
        for h in sorted({h.name for h in FABRIC.hosts}):
            pods.setdefault(leaf_of[h].split("-")[0], []).append(h)
        names = []
        for pod, hosts in sorted(pods.items()):  # 8 hosts: 8 connections x 16 x 17 = 2,176 flows each
            ranks = tuple(RankSpec(j, h, "mlx5_0") for j, h in enumerate(hosts))
            spec = JobSpec(f"big-{pod}", ranks, (TrafficSpec(Pattern.RING, tuple(range(8)), channels=16,
                                                             qps_per_connection=17),))
            jobs.create(rt, spec)
            jobs.create(here, spec)
            names.append(spec.name)
        assert planner_here._batches(names) == [[n] for n in names]  # each alone, one after the other
        assert planner._batches(names) == [names[:2], names[2:]]
        # two large jobs of one pod never share a batch (one part of twice a batch's size, in
        # one process): the later one waits for the next batch, where another pod's joins it
        twin = JobSpec("big-pod0-twin", tuple(RankSpec(j, h, "mlx5_0") for j, h in enumerate(pods["pod0"])),
                       spec.traffic)
        jobs.create(rt, twin)
        jobs.create(here, twin)
        assert planner._batches([names[0], twin.name, names[1], names[2]]) == [
            [names[0], names[1]], [twin.name, names[2]]]
        # A batch with a chunk per process takes more only within the processes' share of
        # flows (2 x 2,048): a small job after the large ones waits for the next batch
        small = _pod_jobs("s", 4, per_pod=1)[0]
        jobs.create(rt, small)
        jobs.create(here, small)
        assert planner._batches([*names, small.name]) == [names[:2], names[2:], [small.name]]
        # ... and small jobs of many pods fill one batch (each pod a part)
        smalls = [s.name for s in _pod_jobs("m", 5, per_pod=2)]
        for spec in _pod_jobs("m", 5, per_pod=2):
            jobs.create(rt, spec)
            jobs.create(here, spec)
        assert planner._batches(smalls) == [smalls]
        before = _parts("processes")
        planner.step()
        planner_here.step()
        assert _parts("processes") - before >= 4
        _checked(rt)
        assert _plans(rt) == _plans(here)
        assert len(_plans(rt)) == 4 + 1 + 1 + 8
    finally:
        planner.parts.close()
        rt.engine.dispose()
        here.engine.dispose()


def test_a_closed_pool_plans_in_the_thread_and_starts_no_processes() -> None:
    """The app shut down while the planner thread was still planning: what it plans next is
    planned in its thread, and no new pool (with nothing left to stop it) is started."""
    pool = PartPool(2)
    pool.close()
    cands = for_fabric(FABRIC)
    specs = _pod_jobs("z", 7, per_pod=1)
    flows = {s.name: te_flows.derive_flows(s) for s in specs}
    tasks = [te_planner.PartTask({n: f}, {n: ActiveJob(f)}, Config(time_limit_s=10.0), time.monotonic() + 10.0)
             for n, f in flows.items()]
    before = _parts("this_process")
    got = pool.runner(1, FABRIC, cands)(tasks)
    assert _parts("this_process") - before == len(tasks) and pool._pool is None
    assert [sorted(g) for g in got] == [[n] for n in flows]
