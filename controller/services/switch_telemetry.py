"""Switch counters: validate a poll against the fabric, keep the latest rates per port.

`POST /v1/telemetry/switches` carries raw monotonic counters; this turns consecutive polls
into per-second rates (`te.counters` handles wraps and resets) and keeps the latest sample
and rates of each (switch, port) in this process's memory, for operators and, later, for
congestion-aware re-planning.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from controller.domain.problems import Problem
from controller.services import topology
from controller.services.errors import Invalid
from controller.services.runtime import Runtime
from controller.te.counters import Sample, rates_per_s

SAMPLES = Counter("c4_switch_port_samples_total", "Switch port counter samples accepted")


@dataclass(frozen=True, slots=True)
class PortPoll:
    port: str
    counters: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class SwitchPoll:
    switch: str
    t_us: int
    ports: Sequence[PortPoll]


class SwitchTelemetry:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, str], tuple[Sample, dict[str, float]]] = {}

    def ingest(self, polls: Sequence[SwitchPoll]) -> int:
        """Check every poll against the fabric and keep it; nothing is kept if one is wrong."""
        fabric, _ = topology.current(self.rt)
        ports: dict[str, set[str]] = {s.name: set() for s in fabric.switches}
        for link in fabric.links:
            for end, port in ((link.a, link.a_port), (link.b, link.b_port)):
                if end in ports:
                    ports[end].add(port)
        problems = []
        for i, poll in enumerate(polls):
            if poll.switch not in ports:
                problems.append(Problem(("samples", i, "switch"), f"unknown switch {poll.switch!r}"))
                continue
            for j, p in enumerate(poll.ports):
                if p.port not in ports[poll.switch]:
                    problems.append(Problem(("samples", i, "ports", j, "port"),
                                            f"switch {poll.switch!r} has no linked port {p.port!r}"))
        if problems:
            raise Invalid(problems)
        accepted = 0
        with self._lock:
            for poll in sorted(polls, key=lambda p: p.t_us):
                for p in poll.ports:
                    key = (poll.switch, p.port)
                    current = Sample(poll.t_us, dict(p.counters))
                    previous = self._latest.get(key)
                    if previous is not None and previous[0].t_us >= poll.t_us:
                        continue  # late or repeated: changes nothing
                    self._latest[key] = (current, rates_per_s(previous[0] if previous else None, current))
                    accepted += 1
        SAMPLES.inc(accepted)
        return accepted

    def ports(self, switch: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            items = sorted(self._latest.items())
        return [{"switch": sw, "port": port, "t_us": sample.t_us, "counters": dict(sample.counters),
                 "rates_per_s": rates}
                for (sw, port), (sample, rates) in items if switch is None or sw == switch]
