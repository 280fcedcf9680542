"""The cyclic garbage collector: paused while heavy work runs, and what survives a pause kept
out of later collections.

A plan or a telemetry batch allocates hundreds of thousands of objects, and with 16k flows'
plans or a 100k-host fabric alive each full collection scans them all, holding the
interpreter lock for up to a second and stalling every other request (`/healthz` included).
So heavy work runs with the collector paused (`paused`); reference counting still frees what
it drops. Nested and concurrent pauses (the planner worker, a link PATCH's thread, heavy HTTP
requests in `api.bodies`) are counted: the collector comes back when the last one ends, in the
state it was in before the first.

What a pause leaves alive sits in the youngest generation, and the first young collection
after it would scan all of it at once: a maximal telemetry batch's queued records (4,096
records, 16,384 peers) cost 55-90 ms there, once per batch. So when the last pause ends with
at least `FREEZE_AT` objects in the youngest generation, everything alive is moved to the
permanent generation (`gc.freeze`): no collection scans it again, and reference counting
still frees it when it is dropped (records leaving the detectors' windows, a replaced plan).

The price: a reference cycle that is garbage at that moment is never collected while frozen.
Heavy requests leave a few hundred such objects each (measured: 13-430 per maximal batch), so
`maintain` (every `C4_GC_MAINTENANCE_S`, default 3600 s; 0: never) unfreezes, collects once
and freezes again: one full collection per interval instead of one per batch. Its pause is
`c4_gc_maintenance_seconds` (0.75-1.2 s with a 100,000-host fabric's 1.05 M objects alive,
measured on 2 loaded cores: the one stall per interval this design accepts); `c4_gc_frozen_objects` shows the permanent generation's size.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram

FREEZE_AT = 20_000  # objects left in the youngest generation when a pause ends: freeze them

_lock = threading.Lock()
_holders = [0, False]  # threads inside `paused`, and whether the collector was on before
_last = [time.monotonic()]  # when `maintain` last collected

FROZEN = Gauge("c4_gc_frozen_objects", "Objects in the permanent generation (left out of every collection)")
# counted when scraped: `gc.get_freeze_count` walks the whole permanent generation (17 ms for 2 M
# objects), which every freeze of a fabric PUT or a heavy batch paid before
FROZEN.set_function(gc.get_freeze_count)
FREEZES = Counter("c4_gc_freezes_total", "Pauses that ended with their survivors frozen (FREEZE_AT or more)")
MAINTENANCE = Histogram("c4_gc_maintenance_seconds",
                        "Full collections of the periodic maintenance (unfreeze, collect, freeze), seconds",
                        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block (see the module docstring)."""
    with _lock:
        if _holders[0] == 0:
            _holders[1] = gc.isenabled()
            gc.disable()
        _holders[0] += 1
    try:
        yield
    finally:
        with _lock:
            if _holders[0] == 1 and gc.get_count()[0] >= FREEZE_AT:
                _freeze()
            _holders[0] -= 1
            if _holders[0] == 0 and _holders[1]:
                gc.enable()


def _freeze() -> None:
    gc.freeze()
    FREEZES.inc()


def freeze() -> None:
    """Freeze what is alive now, whatever its size: a new fabric lives until the next one."""
    with _lock:
        _freeze()


@contextmanager
def lasting() -> Iterator[None]:
    """Build something that lives until the fabric changes (a fabric, its port map): the
    collector paused while it is built, and everything alive then frozen, whatever its size."""
    with paused():
        yield
        freeze()


def settle() -> None:
    """At start-up: collect what exists, then freeze it (modules, schemas, the app live as long
    as the process), so later collections scan only what requests and workers make."""
    with _lock:
        gc.collect()
        gc.freeze()


def maintain(every_s: float = 0.0) -> float:
    """Collect the cycles frozen since the last time (see the module docstring), if `every_s`
    have passed since; skipped while a pause is held (the caller asks again soon: the worker
    runs every minute at most, so a busy planner delays it by minutes, not by an interval).
    Returns the seconds the collection held the interpreter (0 if skipped)."""
    with _lock:
        if _holders[0] or time.monotonic() - _last[0] < every_s:
            return 0.0
        start = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        took = time.perf_counter() - start
        _last[0] = time.monotonic()
    MAINTENANCE.observe(took)
    return took
