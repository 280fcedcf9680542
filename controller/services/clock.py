"""The wall clock, in microseconds since the epoch; the only place services read it."""

from __future__ import annotations

import time


def now_us() -> int:
    return time.time_ns() // 1000
