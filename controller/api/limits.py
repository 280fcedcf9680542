"""What each route may cost before it is trusted: its body-size limit and its admission gate.

A route says it in its declaration, through `openapi_extra` (so `/openapi.json` shows it too):

    @router.put("/topology", ..., openapi_extra=limits.body(limits.LARGEST, gate="fabric"))

- `x-c4-max-body-bytes`: the largest body the route reads; more is a 413 whose message names
  the limit, answered before a byte of JSON is parsed (`api.guard`). Capped by
  `C4_MAX_BODY_BYTES`. A route that declares nothing gets `DEFAULT_BODY_BYTES` (64 KiB):
  every new route is small until its author says otherwise.
- `x-c4-gate`: heavy routes (big documents and batches, generation) pass a gate that bounds
  how many run at once and how many body bytes they hold; a full gate answers 429 with
  `Retry-After` before the body is read. Their JSON is parsed and validated off the event loop
  in slices (`api.bodies`), so `/healthz`, `/metrics` and assignment reads stay fast.

The gates' sizes are here, in one place; `docs/SECURITY.md` explains them.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

DEFAULT_BODY_BYTES = 64 << 10
LARGEST = "C4_MAX_BODY_BYTES"  # as large as the setting allows (the fabric document)
MAX_BODY_KEY = "x-c4-max-body-bytes"
GATE_KEY = "x-c4-gate"


@dataclass(frozen=True)
class GateSpec:
    concurrent: int  # requests through the gate at once
    body_bytes: int  # body bytes they may hold together (a request's own limit always fits)
    retry_after_s: int


GATES: dict[str, GateSpec] = {
    # Replacing or generating the fabric: one at a time (they serialize on the database anyway).
    "fabric": GateSpec(concurrent=1, body_bytes=0, retry_after_s=5),
    # Telemetry and probe ingest from agents: a few batches at once, 64 MiB of bodies in all.
    "ingest": GateSpec(concurrent=4, body_bytes=64 << 20, retry_after_s=1),
}


def body(max_bytes: int | str = DEFAULT_BODY_BYTES, gate: str | None = None) -> dict[str, Any]:
    """The `openapi_extra` of a route that reads up to `max_bytes` (`LARGEST`: the setting)
    and, if `gate` names one of `GATES`, is heavy."""
    if gate is not None and gate not in GATES:
        raise ValueError(f"unknown gate {gate!r}")
    out: dict[str, Any] = {MAX_BODY_KEY: max_bytes}
    if gate is not None:
        out[GATE_KEY] = gate
    return out


def route_limit(openapi_extra: dict[str, Any] | None, largest: int) -> int:
    """The body limit a route declared (see `body`), never above `largest`."""
    declared = (openapi_extra or {}).get(MAX_BODY_KEY, DEFAULT_BODY_BYTES)
    return largest if declared == LARGEST else min(int(declared), largest)


def route_gate(openapi_extra: dict[str, Any] | None) -> str | None:
    gate = (openapi_extra or {}).get(GATE_KEY)
    return gate if isinstance(gate, str) else None


def too_large_body(limit: int) -> bytes:
    return json.dumps({"error": {"code": "payload_too_large",
                                 "message": f"the request body is larger than this route's limit of {limit} bytes",
                                 "details": {"max_body_bytes": limit}}}).encode()


class Gate:
    """Admission for one kind of heavy request: at most `concurrent` at once, holding at most
    `body_bytes` of bodies together (when nonzero). Non-blocking: a request that does not fit
    is refused at once (429), never queued, so a burst cannot pile up memory."""

    def __init__(self, name: str, spec: GateSpec) -> None:
        self.name, self.spec = name, spec
        self._lock = threading.Lock()
        self.running = 0
        self.held_bytes = 0

    def try_enter(self, body_bytes: int) -> bool:
        with self._lock:
            if self.running >= self.spec.concurrent:
                return False
            if self.spec.body_bytes and self.running and self.held_bytes + body_bytes > self.spec.body_bytes:
                return False
            self.running += 1
            self.held_bytes += body_bytes
            return True

    def leave(self, body_bytes: int) -> None:
        with self._lock:
            self.running -= 1
            self.held_bytes -= body_bytes


def gates() -> dict[str, Gate]:
    """One set of gates per application."""
    return {name: Gate(name, spec) for name, spec in GATES.items()}
