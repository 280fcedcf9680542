"""Closed-loop rebalancing: poll intervals from congestion to new weights and to moved flows,
the rebalancer round's own latency, and flaps under an oscillating load; on several fabric
shapes, the real controller (SQLite, planner, rebalancer), simulated time.

    .venv/bin/python -m bench.rebalance [--shape NAME ...] [--poll-s 10] [--json]

Physics: **c4's own load model** (`bench/rebalance/scenario.py`): synthetic switch counters
posted through `POST /v1/telemetry/switches`; a direction's offered load is a fixed
background plus the planned flows' weighted demand, marks at 20 % over capacity. Not a real
fabric: the latencies in poll intervals follow from the detector's thresholds and the
rebalancer's steps on any counters with these shapes; the round latency is this machine's.

Per shape, three scenarios:
- `step`: from t = 0 another tenant's background makes one weighable direction (a job's flow
  crosses it, a sibling of its channel does not; else any direction a flow of job a crosses)
  run over capacity by 3/4 of the planned load on it, so the weights step cannot clear it.
  Figures: the polls (after the load began; a poll at t = 0 gives no rate) whose rebalancer
  round stored new weights and moved flows; that round's wall time (the rebalancer's step
  alone: read, decide, validate, store); the offered load over capacity at the end.
- `degraded`: the direction's capacity falls to 10 % (a bad optic): flows drained off it.
- `oscillating`: 380 Gb/s of background swings between two directions every minute for ten
  minutes, the planner's re-optimisation due every minute: flaps (load sent back onto a
  hot direction within the hold-down) and changes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

from bench.rebalance.scenario import Direction, Scenario, weighable_direction
from controller.domain.fabric import Fabric

SHAPES: dict[str, dict[str, Any]] = {
    "leaf-spine-4x4": {"kind": "leaf-spine", "leaves": 4, "spines": 4, "hosts_per_leaf": 2, "ports_per_nic": 1},
    "leaf-spine-16-spines-8-nics": {"kind": "leaf-spine", "leaves": 4, "spines": 16, "hosts_per_leaf": 2,
                                    "nics_per_host": 8, "ports_per_nic": 1},
    "leaf-spine-dual-port": {"kind": "leaf-spine", "leaves": 4, "spines": 4, "hosts_per_leaf": 2,
                             "ports_per_nic": 2},
    "clos3": {"kind": "clos3", "pods": 2, "leaves_per_pod": 2, "spines_per_pod": 2, "cores": 4,
              "hosts_per_leaf": 2, "ports_per_nic": 1},
}


def rail_rings(name: str, fabric: Fabric, channels: int = 2, qps: int = 2, reverse: bool = False) -> dict[str, Any]:
    """One ring per NIC rail over every host (one rank per NIC)."""
    hosts = [h.name for h in fabric.hosts][:: -1 if reverse else 1]
    nics = [n.name for n in fabric.hosts[0].nics]
    ranks: list[dict[str, Any]] = []
    traffic = []
    for nic in nics:
        start = len(ranks)
        ranks += [{"rank": start + i, "host": h, "nic": nic} for i, h in enumerate(hosts)]
        traffic.append({"pattern": "ring", "ranks": list(range(start, len(ranks))), "channels": channels,
                        "qps_per_connection": qps})
    return {"name": name, "ranks": ranks, "traffic": traffic}


def setup(shape: str, poll_s: float) -> tuple[Scenario, float]:
    sc = Scenario(poll_s=poll_s)
    t = time.monotonic()
    fabric = sc.generate(**SHAPES[shape])
    sc.post_job(rail_rings("a", fabric))
    sc.plan()  # one job at a time (the planner batches jobs posted together)
    sc.post_job(rail_rings("b", fabric, reverse=True))
    sc.plan()
    return sc, time.monotonic() - t


def direction(sc: Scenario, job: str, skip: tuple[Direction, ...] = ()) -> tuple[Direction, bool]:
    """A weighable direction of the job's (True), else any fabric direction one of its flows
    crosses (False: the planner put every channel's flows on one path, so the weights step
    has no sibling to give weight to)."""
    try:
        return weighable_direction(sc, job, skip), True
    except AssertionError:
        host_links = {x.name for x in sc.fabric().links if x.is_host_link}
        for a in sc.assignments(job):
            for d in sc.directions_of(a):
                if d[0] not in host_links and d not in skip:
                    return d, False
        raise


def _capacity(sc: Scenario, d: Direction) -> float:
    return next(x.capacity_gbps for x in sc.fabric().links if x.name == d[0])


def timed_rounds(sc: Scenario, polls: int, poll_s: float, each: Callable[[int], None] | None = None,
                 reopt_every: int = 0) -> dict[str, Any]:
    first: dict[str, tuple[int, float, int]] = {}
    for i in range(polls):
        if each is not None:
            each(i)
        sc.poll(i * poll_s)
        result = sc.round(i * poll_s + 0.1, reoptimize=bool(reopt_every) and i % reopt_every == reopt_every - 1)
        wall_ms = sc.last_round_ms
        for a in result.actions:
            if a.step not in first:
                first[a.step] = (i, wall_ms, 0)
            first[a.step] = (first[a.step][0], first[a.step][1], first[a.step][2] + a.flows)
    return {step: {"poll": i, "round_ms": round(ms, 1), "flows": n} for step, (i, ms, n) in first.items()}


def step_scenario(shape: str, poll_s: float) -> dict[str, Any]:
    sc, setup_s = setup(shape, poll_s)
    try:
        d, weighable = direction(sc, "a")
        cap = _capacity(sc, d)
        sc.background[d] = 0.0
        planned = sc.offered_gbps()[d]
        sc.background[d] = cap - 0.25 * planned
        steps = timed_rounds(sc, 12, poll_s)
        end = sc.offered_gbps()[d] / cap
        return {"shape": shape, "scenario": "step", "direction": list(d), "weighable": weighable, "capacity_gbps": cap,
                "planned_gbps_on_it": round(planned, 3), "background_gbps": round(sc.background[d], 3),
                "onset_s": 0.0, "poll_s": poll_s, "steps": steps,
                "weights_within_polls": steps.get("weights", {}).get("poll"),
                "moves_within_polls": steps.get("moves", {}).get("poll"),
                "offered_over_capacity_at_end": round(end, 4), "setup_s": round(setup_s, 2)}
    finally:
        sc.close()


def degraded_scenario(shape: str, poll_s: float) -> dict[str, Any]:
    sc, _ = setup(shape, poll_s)
    try:
        d, _ = direction(sc, "a")
        cap = _capacity(sc, d)
        sc.background[d] = 0.0
        sc.capacity[d] = 0.1 * cap
        steps = timed_rounds(sc, 8, poll_s)
        left = sum(1 for j in ("a", "b") for a in sc.assignments(j) if d in sc.directions_of(a))
        return {"shape": shape, "scenario": "degraded", "direction": list(d), "steps": steps,
                "flows_left_on_it": left}
    finally:
        sc.close()


def oscillating_scenario(shape: str, poll_s: float, minutes: float = 10.0) -> dict[str, Any]:
    sc, _ = setup(shape, poll_s)
    try:
        da, _ = direction(sc, "a")
        db, _ = direction(sc, "b", (da,))
        period = int(60 / poll_s)

        def swing(i: int) -> None:
            on = (i // period) % 2 == 0
            sc.background[da], sc.background[db] = (380.0, 150.0) if on else (150.0, 380.0)

        steps = timed_rounds(sc, int(minutes * 60 / poll_s) + 1, poll_s, swing, reopt_every=period)
        hold = sc.rebalancer.config.hold_down_s
        return {"shape": shape, "scenario": "oscillating", "minutes": minutes, "flaps": len(sc.flaps(hold)),
                "path_changes": sum(1 for c in sc.changes if c.kind == "path"),
                "weight_changes": sum(1 for c in sc.changes if c.kind == "weight"),
                "last_change_s": max((c.t_s for c in sc.changes), default=None), "steps": steps}
    finally:
        sc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--poll-s", type=float, default=10.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print(f"# uptime: {os.getloadavg()}")
    rows = []
    for shape in args.shape or list(SHAPES):
        for run in (step_scenario, degraded_scenario, oscillating_scenario):
            row = run(shape, args.poll_s)
            rows.append(row)
            if args.json:
                print(json.dumps(row))
            elif row["scenario"] == "step":
                w, m = row["steps"].get("weights", {}), row["steps"].get("moves", {})
                print(f"{shape:30s} step        {'' if row['weighable'] else '(no channel split over paths) '}"
                      f"weights at poll {w.get('poll')} ({w.get('flows')} flows, round "
                      f"{w.get('round_ms')} ms); moves at poll {m.get('poll')} ({m.get('flows')} flows, round "
                      f"{m.get('round_ms')} ms); offered/capacity at end {row['offered_over_capacity_at_end']}")
            elif row["scenario"] == "degraded":
                print(f"{shape:30s} degraded    steps {row['steps']}; flows left on it {row['flows_left_on_it']}")
            else:
                print(f"{shape:30s} oscillating {row['minutes']:.0f} min: flaps {row['flaps']}, path changes "
                      f"{row['path_changes']}, weight changes {row['weight_changes']}, last change at "
                      f"{row['last_change_s']} s")
    print(f"# uptime: {os.getloadavg()}")


if __name__ == "__main__":
    main()
