"""No alarm on healthy runs of NCCL's physics: +-2 s host clock skew, jitter, mixed sizes,
MoE alltoall with +-50% per-peer imbalance, pipeline-parallel sends, a silent agent, an
announced checkpoint, socket completions, one-off stragglers, lost and late duplicates."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.replay import replay
from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simphysics import Physics
from controller.diagnosis.simulator import AgentGap, Checkpoint, SimConfig, simulate

BASE = SimConfig(nranks=16, hosts_per_leaf=4, spines=4, world_bytes=64 << 20, dp_bytes=16 << 20,
                 skew_us=2_000_000, straggler_prob=0.005, duplicate_prob=0.05, loss_prob=0.01,
                 duration_s=25.0)
FAST = DiagnosisConfig(hang_timeout_s=10.0)
CLEAN: dict[str, dict[str, Any]] = {
    "rings": {"seed": 1},
    "rings-jitter-25pct": {"seed": 2, "jitter": 0.25, "straggler_prob": 0.01},
    "mixed-sizes": {"seed": 3, "workload": "mixed"},
    "moe-imbalance-50pct": {"seed": 4, "workload": "moe"},
    "pipeline-parallel": {"seed": 5, "workload": "pp"},
    "agent-silent-12s-records-lost": {"seed": 6, "agent_gaps": (AgentGap(5, 8.0, 12.0),)},
    "agent-silent-12s-records-late": {"seed": 7, "agent_gaps": (AgentGap(9, 8.0, 12.0, True),)},
    "checkpoint-15s-announced": {"seed": 8, "checkpoints": (Checkpoint(8.0, 15.0),)},
    "socket-completions": {"seed": 9, "physics": Physics(completion="socket")},
}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_run_raises_no_alarm(name: str) -> None:
    run = simulate(dataclasses.replace(BASE, **CLEAN[name]))
    assert run.collectives >= 120
    result = replay(run, FAST, tail_us=3_000_000)
    assert result.events == (), [e.alarm.evidence["summary"] for e in result.events]


@pytest.mark.parametrize("rank", ["0", "5", "15"])
def test_one_off_straggler_raises_no_alarm(rank: str) -> None:
    run = simulate(dataclasses.replace(BASE, duration_s=12.0, faults=(Fault("straggler", 5.0, rank),)))
    assert replay(run, FAST).events == ()


def test_job_that_simply_ends_raises_no_hang() -> None:
    run = simulate(dataclasses.replace(BASE, duration_s=5.0))
    assert replay(run, FAST, tail_us=30_000_000).events == ()


def test_agent_that_stops_reporting_while_the_job_runs_on_raises_no_hang() -> None:
    run = simulate(dataclasses.replace(BASE, duration_s=25.0, seed=5, loss_prob=0.0))
    cut_us = run.config.start_us + 5_000_000
    silent = tuple(d for d in run.deliveries if d.record.host != "host5" or d.arrival_us < cut_us)
    # keep one in-flight re-send from host5 as its last word, as a dying agent might leave
    kept = {d.record.identity for d in silent if d.record.t_end_us is not None}
    last = next(d for d in run.deliveries if d.record.host == "host5" and d.arrival_us >= cut_us
                and d.record.t_end_us is None and d.record.identity not in kept)
    deliveries = tuple(sorted((*silent, last), key=lambda d: d.arrival_us))
    beats = tuple(b for b in run.heartbeats if b[1] != "host5" or b[0] < cut_us)
    # a window longer than the hang timeout, as with slow iterations, keeps the stale record
    config = dataclasses.replace(FAST, window_collectives=400)
    result = replay(dataclasses.replace(run, deliveries=deliveries, heartbeats=beats), config)
    assert result.events == ()
