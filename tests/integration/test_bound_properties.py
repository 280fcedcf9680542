"""Property tests of the stored plans, through the real planning service on SQLite.

Random hand-written fabrics (tests/support/handmade.py), random jobs, random sequences of
link down/up, job post/delete and planner steps; after every step, every planned job's
stored `lower_bound` is at most its exact optimum (CP-SAT over every equal-cost path, the
other jobs where they are stored, API.md's demand over all active jobs) and its stored
assignments pass the solver-free validator on the fabric as it is. The planner's worker is
not started: the test runs its steps itself, so states between two steps are seen too.
Seeded and bounded (a few dozen flows per case).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from controller.domain.fabric import LinkState
from controller.domain.jobs import Assignment, FlowKey, JobStatus
from controller.services import jobs, planning, topology
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store.migrate import upgrade
from controller.te import flows as job_flows
from controller.te.validate import plan_problems
from controller.topology.graph import FabricView
from tests.support.handmade import (
    exact_optimum,
    mlag,
    mlag_job,
    peer_link,
    random_fabric,
    random_job,
)

CASES = 24
STEPS = 12


def _runtime(tmp_path: Path) -> Runtime:
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    return Runtime.from_settings(Settings(database_url=url, data_dir=tmp_path))


def _stored(rt: Runtime) -> dict[str, dict[str, object]]:
    return {j["name"]: j for j in jobs.list_jobs(rt)}


def _assignments(rt: Runtime, name: str) -> dict[FlowKey, Assignment]:
    body = jobs.assignments(rt, name)
    out = {}
    for a in body["assignments"]:
        key = FlowKey(a["src_rank"], a["dst_rank"], a["channel"], a["qp"])
        out[key] = Assignment(key, f"{a['src_host']}:{a['src_nic']}:{a['src_port']}",
                              f"{a['dst_host']}:{a['dst_nic']}:{a['dst_port']}", a["udp_sport"], a["weight"],
                              tuple(a["path"]), tuple(a["links"]))
    return out


def violations() -> float:
    """Bounds the service found above a plan and replaced (each one a bug, see `te.summary`)."""
    return (REGISTRY.get_sample_value("c4_plan_bound_violations_total") or 0.0) + (
        REGISTRY.get_sample_value("c4_plans_refused_total") or 0.0)


def check(rt: Runtime, where: str, before: float) -> int:
    """Every planned job: stored bound <= exact optimum, assignments valid; and no bound was
    found above a plan and replaced (the service's safety net must not be what keeps this
    test green). Returns how many planned jobs were checked."""
    assert violations() == before, (where, "a bound came out above its plan, or a plan was refused")
    fabric, _ = topology.current(rt)
    view = FabricView(fabric)
    stored = _stored(rt)
    active = {n: job_flows.derive_flows(jobs.spec_from_document(j)) for n, j in stored.items()
              if j["status"] in (JobStatus.PENDING, JobStatus.PLANNED)}
    planned = {n: _assignments(rt, n) for n, j in stored.items() if j["status"] == JobStatus.PLANNED}
    for name, plan in planned.items():
        assert plan_problems(view, active[name], plan) == [], (where, name)
        opt = exact_optimum(fabric, name, active, planned)
        assert opt is not None, (where, name)
        summary = stored[name]["plan"]
        assert isinstance(summary, dict)
        assert summary["lower_bound"] <= opt + 1e-9, (where, name, summary, opt)
    return len(planned)


def test_mlag_peer_link_loss_bound_stays_below_the_new_optimum(tmp_path: Path) -> None:
    """The fixed case: after the peer link goes down the optimum falls from 4.0 to 2.0; the
    stored bound follows at once (not carried over), and the planner's refresh proves 2.0."""
    rt = _runtime(tmp_path)
    planner = planning.install(rt)
    seen = violations()
    fabric = mlag()
    topology.replace(rt, fabric)
    jobs.create(rt, mlag_job())
    planner.step()
    before = jobs.get(rt, "pairs")["plan"]
    assert before["lower_bound"] == pytest.approx(4.0) and before["max_link_utilization"] == pytest.approx(4.0)
    topology.set_link_state(rt, peer_link(fabric), LinkState.DOWN)
    after = jobs.get(rt, "pairs")["plan"]
    assert after["lower_bound"] <= 2.0 + 1e-9, after
    check(rt, "after the peer link went down", seen)
    for _ in range(3):
        planner.step()
    refreshed = jobs.get(rt, "pairs")["plan"]
    assert refreshed["lower_bound"] == pytest.approx(2.0), refreshed
    check(rt, "after the refresh", seen)
    rt.engine.dispose()


@pytest.mark.parametrize("seed", range(CASES))
def test_stored_bounds_never_exceed_the_exact_optimum(tmp_path: Path, seed: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "REFRESH_DELAY_S", 0.0)  # a link change's refreshes run at the next step
    rng = random.Random(seed)
    rt = _runtime(tmp_path)
    planner = planning.install(rt)
    fabric = random_fabric(rng)
    topology.replace(rt, fabric)
    switch_links = [x.name for x in fabric.links if not x.is_host_link]
    host_links = [x.name for x in fabric.links if x.is_host_link]
    posted = 0
    checked = 0
    seen = violations()
    for step in range(STEPS):
        op = rng.choice(["post", "post", "down", "down", "up", "delete", "step", "step"])
        fabric, _ = topology.current(rt)
        down = [x.name for x in fabric.links if x.state != LinkState.UP]
        if op == "post" or (op == "delete" and not _stored(rt)):
            name = f"j{posted}"
            posted += 1
            jobs.create(rt, random_job(rng, fabric, name))
        elif op == "delete":
            jobs.delete_job(rt, rng.choice(sorted(_stored(rt))))
        elif op == "down" or (op == "up" and not down):
            pool = switch_links if rng.random() < 0.85 else host_links
            up = [n for n in pool if n not in down]
            if up:
                topology.set_link_state(rt, rng.choice(up), rng.choice([LinkState.DOWN, LinkState.DRAINED]))
        elif op == "up":
            topology.set_link_state(rt, rng.choice(down), LinkState.UP)
        checked += check(rt, f"seed {seed} step {step} after {op}", seen)
        planner.step()
        checked += check(rt, f"seed {seed} step {step} after {op} and a planner step", seen)
    assert checked > 0  # some job was planned and checked
    rt.engine.dispose()
