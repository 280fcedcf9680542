"""Injected faults are classified right, first suspect right, one alarm, in time (data-driven),
on the simulator's NCCL physics (coupled rings, RDMA completions, t_first at the proxy op's
start, +-2 s host clock skew, lost and duplicated records).

Scenarios live in `scenarios.json` beside this file: a fault on a 16-rank leaf-spine job and
the alarm expected. A scenario's own `sim` overrides the shared one. The expected kind and
first suspect are the injected fault's own (kind, target), not what a detector once said.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.replay import nth_collective_end_us, replay
from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import Delivery, SimConfig, SimRun, simulate
from controller.domain.alarms import AlarmKind, Suspect, SuspectKind

DATA = json.loads((Path(__file__).parent / "scenarios.json").read_text())
# A 10 s hang timeout keeps the runs short; the default's latency is the benchmark's business.
CONFIG = DiagnosisConfig(hang_timeout_s=10.0)


@functools.cache
def _cached_run(name: str) -> SimRun:
    scenario = next(s for s in DATA["scenarios"] if s["name"] == name)
    fault = Fault(**scenario["fault"])
    duration_s = fault.onset_s + (CONFIG.hang_timeout_s + 4 if "hang" in fault.kind else 10)
    sim = {**DATA["sim"], **scenario.get("sim", {})}
    return simulate(SimConfig(**sim, seed=scenario["seed"], duration_s=duration_s, faults=(fault,)))


def _run(scenario: dict[str, Any]) -> SimRun:
    return _cached_run(scenario["name"])


def _without_flows(run: SimRun) -> SimRun:
    """The same run as telemetry without per-flow progress would report it."""
    return replace(run, deliveries=tuple(
        Delivery(d.arrival_us, replace(d.record, peers=tuple(replace(p, flows=()) for p in d.record.peers)))
        for d in run.deliveries))


def _suspect(data: dict[str, str]) -> Suspect:
    return Suspect(SuspectKind(data["kind"]), data["name"])


def deadline_us(run: SimRun, onset_s: float, kind: AlarmKind, comm: str) -> int:
    """Targets: a hang within hang_timeout + 2 s of its onset, a slowdown within 2 s of the
    end of the slow_window-th collective of its communicator after the onset."""
    onset_us = run.config.start_us + int(onset_s * 1_000_000)
    if "hang" in kind.value:
        return onset_us + int((CONFIG.hang_timeout_s + 2) * 1_000_000)
    nth_end_us = nth_collective_end_us(run, comm, onset_us, CONFIG.slow_window)
    return (run.end_us if nth_end_us is None else nth_end_us) + 2_000_000


@pytest.mark.parametrize("scenario", DATA["scenarios"], ids=lambda s: s["name"])
def test_fault_opens_one_alarm_with_right_kind_and_first_suspect(scenario: dict[str, Any]) -> None:
    run = _run(scenario)
    opened = replay(run, CONFIG).opened()
    assert len(opened) == 1, [e.alarm.evidence["summary"] for e in opened]
    alarm = opened[0].alarm
    expect = scenario["expect"]
    assert alarm.kind == AlarmKind(expect["kind"])
    assert alarm.suspects[0] == _suspect(expect["suspect"]), alarm.evidence["summary"]
    if "equally_likely" in expect:
        assert alarm.evidence["equally_likely"] == expect["equally_likely"]
    assert isinstance(alarm.evidence["summary"], str) and alarm.evidence["summary"]
    onset_us = run.config.start_us + int(scenario["fault"]["onset_s"] * 1_000_000)
    assert onset_us < opened[0].at_us <= deadline_us(run, scenario["fault"]["onset_s"],
                                                     alarm.kind, alarm.comm)


TIED = [s for s in DATA["scenarios"] if "without_flows" in s]


@pytest.mark.parametrize("scenario", TIED, ids=lambda s: s["name"])
def test_per_flow_progress_narrows_to_the_stuck_flows_and_its_absence_still_finds_the_link(
        scenario: dict[str, Any]) -> None:
    """A dead link: with per-flow `net_us` only the flows still on the network are the
    suspects' source, and the dead link is named alone; without flows, the stuck connections'
    every flow counts, and the dead link stays among the suspects."""
    run = _run(scenario)
    target = _suspect(scenario["expect"]["suspect"])
    with_flows = replay(run, CONFIG).opened()
    assert len(with_flows) == 1
    alarm = with_flows[0].alarm
    assert alarm.suspects[0] == target and alarm.evidence["equally_likely"] == 1
    assert alarm.evidence["stalled_flows"], alarm.evidence

    without = replay(_without_flows(run), CONFIG).opened()
    assert len(without) == 1
    old = without[0].alarm
    assert old.kind == alarm.kind and "stalled_flows" not in old.evidence
    assert target in old.suspects


def test_repaired_fault_resolves_after_quiet_window() -> None:
    fault = Fault("slow_nic_port", 5.0, "host6:mlx5_0:p0", end_s=15.0)
    run = simulate(SimConfig(**DATA["sim"], seed=1, duration_s=30.0, faults=(fault,)))
    config = DiagnosisConfig(quiet_window_s=5.0)
    events = replay(run, config).events
    assert [e.event for e in events] == ["opened", "resolved"]
    assert events[1].alarm.incident_key == events[0].alarm.incident_key
    repaired_us = run.config.start_us + 15_000_000
    assert events[1].at_us >= repaired_us + 5_000_000


def test_job_without_routes_is_still_localised_to_the_host() -> None:
    fault = Fault("slow_nic_port", 5.0, "host6:mlx5_0:p0")
    run = simulate(SimConfig(**DATA["sim"], seed=1, duration_s=12.0, faults=(fault,)))
    diagnoser = Diagnoser(CONFIG)
    for d in run.deliveries:
        diagnoser.ingest((d.record,), d.arrival_us)
    findings = diagnoser.findings({}, run.end_us)
    assert [f.kind for f in findings] == [AlarmKind.COMM_SLOW]
    assert findings[0].suspects[0] == Suspect(SuspectKind.HOST, "host6")


def test_two_faults_at_once_open_two_alarms_each_with_its_own_first_suspect() -> None:
    by_name = {s["name"]: s for s in DATA["scenarios"]}
    port = by_name["slow_nic_port-1-host6:mlx5_0:p0"]["fault"]
    link = by_name["slow_link-2-leaf3:Ethernet3--spine3:Ethernet3-ab"]["fault"]
    run = simulate(SimConfig(**DATA["sim"], seed=2, duration_s=22.0,
                             faults=(Fault(**port), Fault(**link))))
    opened = replay(run, CONFIG).opened()
    firsts = sorted(e.alarm.suspects[0].name for e in opened)
    assert firsts == sorted([port["target"], link["target"]])
