"""Emit an event to every webhook subscribed to it, inside the caller's transaction.

Event names (API.md plus the ones c4 adds): `alarm.opened`, `alarm.resolved`,
`host.isolated`, `host.released`, `job.restart_requested`, `job.replanned`, `job.failed`
(a job lost its plan: no path between two of its ranks, or its plan could not be stored).
A delivery body is `{"event": ..., "at_us": ..., "data": {...}}`.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from controller.store import outbox_repo

EVENTS = ("alarm.opened", "alarm.resolved", "host.isolated", "host.released",
          "job.restart_requested", "job.replanned", "job.failed")


def emit(session: Session, event: str, data: dict[str, Any], now_us: int) -> int:
    """Queue `event` for its subscribers; returns how many deliveries were queued."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}")
    body = json.dumps({"event": event, "at_us": now_us, "data": data}, separators=(",", ":"), sort_keys=True)
    hooks = outbox_repo.subscribers(session, event)
    for hook in hooks:
        outbox_repo.enqueue(session, hook.id, event, body, now_us)
    return len(hooks)
