"""No alarm on healthy runs: jitter, host clock skew, one-off stragglers, late duplicates."""

from __future__ import annotations

import dataclasses

import pytest

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.replay import replay
from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import SimConfig, simulate

CLEAN = [
    {"seed": 1, "skew_us": 50_000, "straggler_prob": 0.005},
    {"seed": 2, "skew_us": 50_000, "straggler_prob": 0.01, "duplicate_prob": 0.2},
    {"seed": 3, "skew_us": 0, "jitter": 0.10},
    {"seed": 4, "skew_us": 50_000, "jitter": 0.25, "straggler_prob": 0.01},
]


@pytest.mark.parametrize("params", CLEAN, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_clean_run_raises_no_alarm(params: dict[str, float]) -> None:
    run = simulate(SimConfig(nranks=16, hosts_per_leaf=4, spines=4, duration_s=40.0, **params))  # type: ignore[arg-type]
    assert run.collectives >= 300
    result = replay(run, DiagnosisConfig(), tail_us=5_000_000)
    assert result.events == ()


@pytest.mark.parametrize("rank", ["0", "5", "15"])
def test_one_off_straggler_raises_no_alarm(rank: str) -> None:
    fault = Fault("straggler", 8.0, rank)
    run = simulate(SimConfig(nranks=16, hosts_per_leaf=4, spines=4, duration_s=20.0,
                             faults=(fault,)))
    assert replay(run, DiagnosisConfig()).events == ()


def test_job_that_simply_ends_raises_no_hang() -> None:
    run = simulate(SimConfig(nranks=16, hosts_per_leaf=4, spines=4, duration_s=10.0))
    result = replay(run, DiagnosisConfig(), tail_us=60_000_000)
    assert result.events == ()


def test_agent_that_stops_reporting_while_the_job_runs_on_raises_no_hang() -> None:
    run = simulate(SimConfig(nranks=16, hosts_per_leaf=4, spines=4, duration_s=50.0, seed=5))
    cut_us = run.config.start_us + 5_000_000
    silent = tuple(d for d in run.deliveries if d.record.host != "host5" or d.arrival_us < cut_us)
    # keep one in-flight re-send from host5 as its last word, as a dying agent might leave
    kept = {d.record.identity for d in silent if d.record.t_end_us is not None}
    last = next(d for d in run.deliveries if d.record.host == "host5" and d.arrival_us >= cut_us
                and d.record.t_end_us is None and d.record.identity not in kept)
    deliveries = tuple(sorted((*silent, last), key=lambda d: d.arrival_us))
    # a window longer than the hang timeout, as with slow iterations, keeps the stale record
    config = DiagnosisConfig(window_collectives=400)
    result = replay(dataclasses.replace(run, deliveries=deliveries), config)
    assert result.events == ()
