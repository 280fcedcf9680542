"""No alarm on healthy runs: jitter, host clock skew, one-off stragglers, late duplicates."""

from __future__ import annotations

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
