"""The cyclic garbage collector, paused while the planner works.

A plan allocates hundreds of thousands of short-lived acyclic objects, and with 16k flows'
plans alive each full collection scans them all (a third of a link re-plan's time).
Reference counting still frees them. Nested and concurrent pauses (the planner worker and a
link PATCH's thread) are counted: the collector comes back when the last one ends, in the
state it was in before the first.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = [0, False]  # threads inside `paused`, and whether the collector was on before


@contextmanager
def paused() -> Iterator[None]:
    with _lock:
        if _holders[0] == 0:
            _holders[1] = gc.isenabled()
            gc.disable()
        _holders[0] += 1
    try:
        yield
    finally:
        with _lock:
            _holders[0] -= 1
            if _holders[0] == 0 and _holders[1]:
                gc.enable()
