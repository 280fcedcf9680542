"""Rates from raw switch counters: deltas over time with wraps and resets handled.

Switch agents post raw monotonic counters (API.md, `POST /v1/telemetry/switches`). A counter
that went down either wrapped (it was near the top of its 32- or 64-bit range) or was reset
(the switch or its agent restarted); a wrap gives `top - old + new`, a reset gives no rate
for that interval. Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

COUNTER_WIDTHS = (32, 64)
WRAP_MARGIN = 0.25  # an old value in the top quarter of a width may have wrapped


@dataclass(frozen=True, slots=True)
class Sample:
    """One port's counters at `t_us` (absent counters are omitted)."""

    t_us: int
    counters: Mapping[str, int]


def delta(old: int, new: int) -> int | None:
    """Counter increase from `old` to `new`, or None when it was reset."""
    if new >= old:
        return new - old
    for bits in COUNTER_WIDTHS:
        top = 1 << bits
        if old < top and old >= top * (1 - WRAP_MARGIN) and new < top * WRAP_MARGIN:
            return top - old + new
    return None


def rates_per_s(previous: Sample | None, current: Sample) -> dict[str, float]:
    """Per-second rates of the counters both samples carry; {} when no interval exists."""
    if previous is None or current.t_us <= previous.t_us:
        return {}
    seconds = (current.t_us - previous.t_us) / 1e6
    out = {}
    for name, value in current.counters.items():
        before = previous.counters.get(name)
        if before is None:
            continue
        d = delta(before, value)
        if d is not None:
            out[name] = d / seconds
    return out
