"""The wall clock, in microseconds since the epoch; the only place services read it.

`iso8601` is the one way c4 writes an instant for people: ISO 8601 in UTC with microseconds,
e.g. `2025-11-29T15:26:52.000000Z`. API responses and webhook bodies carry it beside every
`*_us` instant, under the same name without `_us` (`opened_at_us` -> `opened_at`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_us() -> int:
    return time.time_ns() // 1000


def iso8601(t_us: int) -> str | None:
    """`t_us` (microseconds since the epoch) as ISO 8601 UTC; None when out of range."""
    try:
        return (_EPOCH + timedelta(microseconds=t_us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, ValueError, TypeError):
        return None


_INSTANT_PREFIXES = ("t_", "last_", "first_", "next_")


def is_instant_field(name: str) -> bool:
    """Whether a field named so holds an instant (`*_at_us`, `t_us`, `t_*_us`, `last_*_us`,
    `first_*_us`, `next_*_us`), not a duration (`net_us`, `gap_us`)."""
    return name.endswith("_at_us") or (name.endswith("_us") and name.startswith(_INSTANT_PREFIXES))
