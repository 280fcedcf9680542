"""Replay a simulated run through a `Diagnoser` as the controller would see it.

Deliveries are ingested in arrival order and the detectors evaluated every `eval_period_us` of
controller time, up to the end of the run. Used by tests, the benchmark and `c4 demo`. Pure:
simulated time only, no clock, no I/O (the CPU time of detection is measured by callers).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.simulator import SimRun
from controller.domain.alarms import AlarmEvent


@dataclass(frozen=True, slots=True)
class ReplayResult:
    events: tuple[AlarmEvent, ...]
    records: int
    evaluations: int
    max_records_held: int

    def opened(self) -> list[AlarmEvent]:
        return [e for e in self.events if e.event == "opened"]


def replay(
    run: SimRun,
    config: DiagnosisConfig,
    eval_period_us: int = 500_000,
    tail_us: int = 0,
    diagnoser: Diagnoser | None = None,
) -> ReplayResult:
    """Feed `run` to `diagnoser` (a fresh one by default); evaluate until `end_us + tail_us`."""
    engine = diagnoser if diagnoser is not None else Diagnoser(config)
    routes = {run.routes.job: run.routes}
    events: list[AlarmEvent] = []
    deliveries = run.deliveries
    i = 0
    evaluations = 0
    max_held = 0
    now_us = run.config.start_us + eval_period_us
    stop_us = run.end_us + tail_us
    while now_us <= stop_us:
        j = i
        while j < len(deliveries) and deliveries[j].arrival_us <= now_us:
            j += 1
        engine.ingest((d.record for d in deliveries[i:j]), now_us)
        i = j
        events.extend(engine.evaluate(routes, now_us))
        evaluations += 1
        max_held = max(max_held, engine.record_count())
        now_us += eval_period_us
    return ReplayResult(tuple(events), len(deliveries), evaluations, max_held)


def nth_collective_end_us(run: SimRun, comm: str, after_us: int, n: int) -> int | None:
    """When the n-th collective of `comm` that began after `after_us` ended, by the latest
    rank's clock (the slow-detection deadline is counted in collectives); None if fewer ran."""
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for delivery in run.deliveries:
        rec = delivery.record
        if rec.comm != comm or rec.t_end_us is None:
            continue
        starts[rec.seq] = min(starts.get(rec.seq, rec.t_start_us), rec.t_start_us)
        ends[rec.seq] = max(ends.get(rec.seq, rec.t_end_us), rec.t_end_us)
    after = sorted(s for s, t in starts.items() if t >= after_us)
    return ends[after[n - 1]] if len(after) >= n else None
