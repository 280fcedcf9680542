"""Closed-loop rebalancing on the real controller: synthetic switch counters posted with
`POST /v1/telemetry/switches` → congestion → weights lowered → still congested → flows moved →
calm → no move back within the hold-down; an oscillating load that must not flap; the
per-fabric and per-job switches. Simulated time (`now`), c4's own load model for the
counters (`bench.rebalance.scenario` says which physics)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from bench.rebalance.scenario import Change, Scenario, ring_job, weighable_direction
from controller.services import planning

POLL = 10.0


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    real = planning.emit
    monkeypatch.setattr(planning, "emit", lambda s, e, d, t: seen.append({"event": e, **d}) or real(s, e, d, t))
    return seen


def _two_jobs(sc: Scenario, b_rebalances: bool = True) -> None:
    fabric = sc.generate(kind="leaf-spine", leaves=4, spines=4, hosts_per_leaf=2, ports_per_nic=1)
    hosts = [h.name for h in fabric.hosts]
    sc.post_job(ring_job("a", hosts))
    sc.plan()  # a alone first (a batch of both places every channel on one path: nothing to weigh)
    sc.post_job(ring_job("b", hosts[::-1], rebalance=b_rebalances))
    sc.plan()
    assert [j["status"] for j in sc.jobs()] == ["planned", "planned"]


@pytest.fixture
def scenario(database_url: str) -> Iterator[Scenario]:
    sc = Scenario(database_url)
    yield sc
    sc.close()


def refused() -> float:
    return REGISTRY.get_sample_value("c4_plans_refused_total") or 0.0


def test_weights_then_moves_then_calm_and_no_move_back(scenario: Scenario, events: list[dict[str, Any]]) -> None:
    sc = scenario
    _two_jobs(sc, b_rebalances=False)
    assert sc.job("b")["rebalance"] is False and "rebalance" not in sc.job("a")
    d = weighable_direction(sc, "a", crossed_by="b")
    before = {j["name"]: (j["version"], sc.assignments(j["name"])) for j in sc.jobs()}
    refused_before = refused()
    # Another tenant puts 365 Gb/s on the 400 Gb/s direction from t = 0: with a's and b's
    # flows (25 Gb/s each) it is over capacity, the weights step alone cannot clear it, moving
    # a's flow can (b's stays: b opted out).
    sc.background[d] = 365.0
    steps: dict[str, float] = {}
    for i in range(0, 33):
        t = i * POLL
        sc.poll(t)
        result = sc.round(t + 0.1)
        for a in result.actions:
            steps.setdefault(a.step, t)
    # Congestion entered at the second hot poll (t = 20 s); weights that same round, moves at
    # the next poll that was still hot: 2 and 3 poll intervals after the load began.
    assert steps == {"weights": 20.0, "moves": 30.0}
    after = {j["name"]: (j["version"], sc.assignments(j["name"])) for j in sc.jobs()}
    # Job b opted out: its load counted, nothing of it changed.
    assert after["b"] == before["b"]
    a_changes = [c for c in sc.changes if c.job == "a"]
    assert {c.t_s for c in a_changes} == {20.1, 30.1}, a_changes  # nothing after the move
    moved = [c for c in a_changes if c.kind == "path"]
    assert moved and all(c.t_s == 30.1 for c in moved)
    view_dirs = {c.key: sc.directions_of({"path": c.after}) for c in moved}
    assert all(d not in dirs for dirs in view_dirs.values())
    # Weights: lowered at 20 s on the channel crossing d (its sibling took it), default again
    # once the crossing flow had moved off.
    lowered = [c for c in a_changes if c.kind == "weight" and c.t_s == 20.1 and c.after < c.before]
    assert lowered and all(d in sc.directions_of({"path": c.path}) for c in lowered)
    assert all(x["weight"] == pytest.approx(0.25) for x in after["a"][1])
    # Versions bumped, job.replanned with the reason, the summary shows what it answered.
    assert after["a"][0] == before["a"][0] + 2
    replans = [e for e in events if e["event"] == "job.replanned"]
    assert [(e["job"], e["reason"], e["moved_flows"]) for e in replans] == [
        ("a", "congestion", 0), ("a", "congestion", len(moved))]
    plan = sc.job("a")["plan"]
    assert [(x["step"], x["link"], x["direction"]) for x in plan["congestion"]] == [
        ("weights", d[0], d[1]), ("moves", d[0], d[1])]
    answered = plan["congestion"][1]
    assert answered["measured_gbps"] == pytest.approx(400.0)  # the direction ran full
    assert answered["background_gbps"] == pytest.approx(400.0 - answered["planned_gbps"])
    assert answered["ecn_marked_fraction"] > 0.05 and answered["degraded"] is False
    assert plan["moved_flows"] == len(moved)
    assert refused() == refused_before
    # Calm now; the detector let go of the direction.
    assert sc.rounds[-1][1].congested == [] and sc.rounds[4][1].congested  # congested at 40 s, not at 320 s
    assert sc.rebalancer.holds.active(sc.t0_us + int(300e6)) and not sc.rebalancer.holds.active(sc.t0_us + int(331e6))


def test_an_oscillating_load_does_not_flap(tmp_path: Any) -> None:
    """Another tenant's 380 Gb/s swings between two directions every minute for ten minutes,
    with the planner's re-optimisation falling due every minute: zero flaps (load sent back
    onto a direction within the hold-down), and the rebalancer acts only on the first swings."""
    sc = Scenario()
    try:
        _two_jobs(sc)
        da = weighable_direction(sc, "a")
        db = weighable_direction(sc, "b", (da,))
        for i in range(0, 61):
            t = i * POLL
            on = (t // 60) % 2 == 0
            sc.background[da], sc.background[db] = (380.0, 150.0) if on else (150.0, 380.0)
            sc.poll(t)
            sc.round(t + 0.1, reoptimize=i % 6 == 5)
        assert sc.flaps(300.0) == []
        paths = [c for c in sc.changes if c.kind == "path"]
        assert paths, "the load never made the rebalancer move a flow"
        assert len({(c.job, c.key) for c in paths}) == len(paths), "a flow moved twice in ten minutes"
        assert max(c.t_s for c in sc.changes) < 120.0  # settled after the first two swings
    finally:
        sc.close()


def test_flaps_are_counted() -> None:
    """The flap count is not vacuous: load taken off a hot direction and put back within the
    hold-down is one."""
    sc = Scenario.__new__(Scenario)
    hot = ("l1", "ab")
    path = ("h0:n:p0", "leaf0", "spine0", "leaf1", "h1:n:p0")
    other = ("h0:n:p0", "leaf0", "spine1", "leaf1", "h1:n:p0")

    class View:
        def directed_links_of(self, p: tuple[str, ...]) -> list[tuple[str, str]]:
            return [hot] if p == path else [("l2", "ab")]

    class Round:
        congested = [type("C", (), {"link": "l1", "direction": "ab"})()]

    sc.rounds = [(0.0, Round())]  # type: ignore[list-item]
    sc.fabric = lambda: None  # type: ignore[method-assign, assignment, return-value]
    key = (0, 1, 0, 0)
    sc.changes = [Change(10.0, "a", key, "path", path, other, other), Change(100.0, "a", key, "path", other, path, path)]
    import bench.rebalance.scenario as module

    real = module.FabricView
    module.FabricView = lambda _f: View()  # type: ignore[assignment, misc, return-value]
    try:
        assert len(sc.flaps(300.0)) == 1 and sc.flaps(60.0) == []
    finally:
        module.FabricView = real  # type: ignore[misc]


def test_rebalancing_off_for_the_fabric_changes_nothing(tmp_path: Any) -> None:
    sc = Scenario(settings={"rebalance_enabled": False})
    try:
        _two_jobs(sc)
        d = weighable_direction(sc, "a")
        sc.background[d] = 380.0
        for i in range(6):
            sc.poll(i * POLL)
            r = sc.round(i * POLL + 0.1)
        assert r.congested and [c.link for c in r.congested] == [d[0]]
        assert sc.changes == [] and not r.actions
    finally:
        sc.close()


def test_the_reoptimisation_waits_while_moves_are_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner's periodic re-optimisation does not see the measured background: it waits
    while the rebalancer holds moved flows, and runs again once they are released."""
    sc = Scenario()
    try:
        _two_jobs(sc)
        d = weighable_direction(sc, "a")
        sc.background[d] = 380.0
        for i in range(4):
            sc.poll(i * POLL)
            sc.round(i * POLL + 0.1)
        assert any(c.kind == "path" for c in sc.changes)
        reasons: list[str] = []
        real = sc.planner._plan

        def spy(names, config, reason, *a, **k):  # type: ignore[no-untyped-def]
            reasons.append(reason)
            return real(names, config, reason, *a, **k)

        monkeypatch.setattr(sc.planner, "_plan", spy)
        sc.planner.memory.reopt_due = True
        sc.planner.step()
        assert "reoptimize" not in reasons and sc.planner.memory.reopt_due
        sc.rebalancer.episodes.clear()
        monkeypatch.setattr("controller.services.rebalance.now_us", lambda: sc.t0_us + int(400e6))
        sc.planner.step()  # holds over (400 s > 30 s + 300 s), no episode: it runs
        assert "reoptimize" in reasons
    finally:
        sc.close()


def test_the_ingest_wakes_the_rebalancer_when_lost_capacity_is_confirmed_on_a_congested_direction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A direction congested at line rate that then loses capacity makes no transition (it is
    congested already); the ingest whose sample confirms the lost capacity wakes the
    rebalancer anyway (it judges the link degraded on it), and only that one: not the first
    lost-capacity sample, not the re-poll window that does not span enough yet."""
    sc = Scenario()
    try:
        fabric = sc.generate(kind="leaf-spine", leaves=2, spines=2, hosts_per_leaf=1, ports_per_nic=1)
        link = next(x for x in fabric.links if x.a.startswith("leaf") and x.b.startswith("spine"))
        d = (link.name, "ab")
        wakes: list[float] = []
        now = [0.0]
        monkeypatch.setattr(sc.rebalancer.worker, "wake", lambda: wakes.append(now[0]))
        sc.background[d] = 1.2 * link.capacity_gbps  # marks 20 % at line rate

        def poll(t: float) -> None:
            now[0] = t
            sc.poll(t)

        for t in range(5):
            poll(float(t))
        assert wakes == [2.0]  # entered congestion (the smoothed rule, second hot sample)
        sc.capacity[d] = 0.2 * link.capacity_gbps  # lost capacity, still marking
        for t in (5.0, 5.35, 5.7, 6.0):
            poll(t)
        assert wakes == [2.0, 5.7]
    finally:
        sc.close()
