"""Background work (planner, detectors, webhook delivery) on threads, never in a request.

A `PeriodicWorker` runs one `step` every `interval_s`, or at once when woken. A failing
step is logged and reported in `/readyz` and `/metrics`; the worker keeps going, so a
database outage pauses the work instead of killing it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class PeriodicWorker:
    def __init__(self, name: str, interval_s: float, step: Callable[[], object],
                 on_start: Callable[[], object] | None = None) -> None:
        self.name = name
        self.interval_s = interval_s
        self._step = step
        self._on_start = on_start  # told each time the worker starts (a process leading again)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.last_ok_monotonic: float | None = None
        self.runs = 0
        self.failures = 0

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            if self._on_start is not None:
                self._on_start()
            self._thread = threading.Thread(target=self._loop, name=f"c4-{self.name}", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def status(self) -> str:
        if self._thread is None:
            return "stopped"
        return f"error: {self.last_error}" if self.last_error else "ok"

    def run_once(self) -> None:
        self.runs += 1
        try:
            self._step()
        except Exception as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("worker %s failed: %s", self.name, self.last_error)
        else:
            self.last_error = None
            self.last_ok_monotonic = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            self.run_once()
