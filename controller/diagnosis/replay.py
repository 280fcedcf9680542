"""Replay simulated runs through a `Diagnoser` as the controller would see them.

Deliveries and heartbeats are ingested at their arrival times, announced pauses become known
when announced, and the detectors are evaluated every `eval_period_us` of controller time, up
to the end of the runs. Several runs (jobs sharing a fabric) replay into one diagnoser. Used by
tests, the benchmark and `c4 demo`. Pure: simulated time only, no clock, no I/O (the CPU time
of detection is measured by callers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.simulator import Delivery, SimRun
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
    runs: SimRun | Sequence[SimRun],
    config: DiagnosisConfig,
    eval_period_us: int = 500_000,
    tail_us: int = 0,
    diagnoser: Diagnoser | None = None,
    announce_pauses: bool = True,
) -> ReplayResult:
    """Feed `runs` to `diagnoser` (a fresh one by default); evaluate until the latest
    `end_us + tail_us`."""
    all_runs = [runs] if isinstance(runs, SimRun) else list(runs)
    engine = diagnoser if diagnoser is not None else Diagnoser(config)
    routes = {run.routes.job: run.routes for run in all_runs}
    deliveries: list[Delivery] = sorted((d for run in all_runs for d in run.deliveries),
                                        key=lambda d: d.arrival_us)
    beats = sorted(b for run in all_runs for b in run.heartbeats)
    pauses = sorted((p for run in all_runs for p in run.pauses if announce_pauses),
                    key=lambda p: p.announced_us)
    events: list[AlarmEvent] = []
    i = b = 0
    evaluations = 0
    max_held = 0
    now_us = min(run.config.start_us for run in all_runs) + eval_period_us
    stop_us = max(run.end_us for run in all_runs) + tail_us
    while now_us <= stop_us:
        while i < len(deliveries) and deliveries[i].arrival_us <= now_us:
            engine.ingest((deliveries[i].record,), deliveries[i].arrival_us)
            i += 1
        while b < len(beats) and beats[b][0] <= now_us:
            engine.heard_from(beats[b][1], beats[b][0])
            b += 1
        known: dict[str, list[tuple[int, int]]] = {}
        for p in pauses:
            if p.announced_us <= now_us:
                known.setdefault(p.job, []).append((p.from_us, p.until_us))
        events.extend(engine.evaluate(routes, now_us, known))
        evaluations += 1
        max_held = max(max_held, engine.record_count())
        now_us += eval_period_us
    return ReplayResult(tuple(events), len(deliveries), evaluations, max_held)


def nth_collective_end_us(run: SimRun, comm: str, after_us: int, n: int) -> int | None:
    """When (true time) the n-th collective of `comm` that began after `after_us` ended on its
    last rank (the slow-detection deadline is counted in collectives); None if fewer ran."""
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for delivery in run.deliveries:
        rec = delivery.record
        if rec.comm != comm or rec.t_end_us is None:
            continue
        start, end = run.true_us(rec.rank, rec.t_start_us), run.true_us(rec.rank, rec.t_end_us)
        starts[rec.seq] = min(starts.get(rec.seq, start), start)
        ends[rec.seq] = max(ends.get(rec.seq, end), end)
    after = sorted(s for s, t in starts.items() if t >= after_us)
    return ends[after[n - 1]] if len(after) >= n else None
