"""What a detector found in one evaluation, before incidents are tracked.

A `Finding` is a candidate alarm: the incident tracker turns the first finding of an incident
into an `Alarm` and folds later ones into it. Pure values; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.domain.alarms import AlarmKind, Suspect


@dataclass(frozen=True, slots=True)
class Finding:
    kind: AlarmKind
    job: str
    comm: str
    seq: int
    suspects: tuple[Suspect, ...]
    evidence: Mapping[str, object]

    @property
    def first_suspect(self) -> Suspect | None:
        return self.suspects[0] if self.suspects else None


def pct(ratio: float) -> str:
    """A ratio as a whole percentage for evidence summaries."""
    return f"{round(ratio * 100)}%"


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of nothing")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
