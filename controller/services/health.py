"""Readiness: is the database reachable and at the migrations' head; how are the workers."""

from __future__ import annotations

from typing import Any

from controller.services.runtime import Runtime
from controller.store.db import ping
from controller.store.migrate import current_revision, head_revision


def readiness(rt: Runtime) -> dict[str, Any]:
    reason = ping(rt.engine)
    checks: dict[str, Any] = {"database": "ok" if reason is None else f"unreachable: {reason}"}
    ready = reason is None
    if ready:
        current, head = current_revision(rt.engine), head_revision()
        checks["migrations"] = "ok" if current == head else f"at {current}, head is {head}; run c4 migrate"
        ready = current == head
    checks["leader"] = "this process" if rt.leading else "another process"
    if rt.leading:
        for name, status in sorted(rt.worker_status().items()):
            checks[f"worker:{name}"] = status
    for more in rt.checks:
        checks.update(more())
    return {"status": "ready" if ready else "not_ready", "checks": checks}
