"""Injected faults are classified right, first suspect right, one alarm, in time (data-driven).

Scenarios live in `scenarios.json` beside this file: a fault on a 16-rank leaf-spine job with
±50 ms host clock skew, rare 3x stragglers and duplicated deliveries, and the alarm expected.
A scenario's own `sim` overrides the shared one; `without_flows` is the alarm the same run
gives when the records carry no per-flow progress (`peers[].flows`).
"""

from __future__ import annotations

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
CONFIG = DiagnosisConfig()


def _run(scenario: dict[str, Any]) -> SimRun:
    fault = Fault(**scenario["fault"])
    duration_s = fault.onset_s + (CONFIG.hang_timeout_s + 5 if "hang" in fault.kind else 12)
    sim = {**DATA["sim"], **scenario.get("sim", {})}
    return simulate(SimConfig(**sim, seed=scenario["seed"], duration_s=duration_s, faults=(fault,)))


def _without_flows(run: SimRun) -> SimRun:
    """The same run as telemetry without per-flow progress would report it."""
    return replace(run, deliveries=tuple(
        Delivery(d.arrival_us, replace(d.record, peers=tuple(replace(p, flows=()) for p in d.record.peers)))
        for d in run.deliveries))


def _suspect(data: dict[str, str]) -> Suspect:
    return Suspect(SuspectKind(data["kind"]), data["name"])


@pytest.mark.parametrize("scenario", DATA["scenarios"], ids=lambda s: s["name"])
def test_fault_opens_one_alarm_with_right_kind_and_first_suspect(scenario: dict[str, Any]) -> None:
    run = _run(scenario)
    result = replay(run, CONFIG)
    opened = result.opened()
    assert len(opened) == 1, [e.alarm.evidence["summary"] for e in opened]
    alarm = opened[0].alarm
    expect = scenario["expect"]
    assert alarm.kind == AlarmKind(expect["kind"])
    suspect = _suspect(expect["suspect"])
    assert alarm.suspects[0] == suspect, alarm.evidence["summary"]
    if "equally_likely" in expect:
        assert alarm.evidence["equally_likely"] == expect["equally_likely"]
    assert isinstance(alarm.evidence["summary"], str) and alarm.evidence["summary"]

    onset_us = run.config.start_us + int(scenario["fault"]["onset_s"] * 1_000_000)
    if "hang" in alarm.kind.value:
        deadline_us = onset_us + int((CONFIG.hang_timeout_s + 2) * 1_000_000)
    else:
        nth_end_us = nth_collective_end_us(run, alarm.comm, onset_us, CONFIG.slow_window)
        deadline_us = (run.end_us if nth_end_us is None else nth_end_us) + 2_000_000
    assert onset_us < opened[0].at_us <= deadline_us


TIED = [s for s in DATA["scenarios"] if "without_flows" in s]


@pytest.mark.parametrize("scenario", TIED, ids=lambda s: s["name"])
def test_per_flow_progress_breaks_the_tie_and_its_absence_changes_nothing(scenario: dict[str, Any]) -> None:
    """A dead link crossed by one stuck connection: with per-flow progress only the stalled
    flow's links are suspects, so the dead one is named alone; without it, every link of the
    connection's flows explains the data equally, as before per-flow progress existed."""
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
    expect = scenario["without_flows"]
    assert old.kind == alarm.kind
    assert old.evidence["equally_likely"] == expect["equally_likely"] >= 2
    assert list(old.suspects) == [_suspect(s) for s in expect["suspects"]]
    assert target in old.suspects and "stalled_flows" not in old.evidence


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
    run = simulate(SimConfig(**DATA["sim"], seed=1, duration_s=15.0, faults=(fault,)))
    diagnoser = Diagnoser(CONFIG)
    diagnoser.ingest((d.record for d in run.deliveries), run.end_us)
    findings = diagnoser.findings({}, run.end_us)
    assert [f.kind for f in findings] == [AlarmKind.COMM_SLOW]
    assert findings[0].suspects[0] == Suspect(SuspectKind.HOST, "host6")


def test_two_faults_at_once_open_two_alarms_each_with_its_own_first_suspect() -> None:
    by_name = {s["name"]: s for s in DATA["scenarios"]}
    port = by_name["slow_nic_port-1-host6:mlx5_0:p0"]["fault"]
    link = by_name["slow_link-2-leaf3:Ethernet3--spine3:Ethernet3-ab"]["fault"]
    run = simulate(SimConfig(**DATA["sim"], seed=2, duration_s=25.0,
                             faults=(Fault(**port), Fault(**link))))
    opened = replay(run, CONFIG).opened()
    firsts = sorted(e.alarm.suspects[0].name for e in opened)
    assert firsts == sorted([port["target"], link["target"]])
