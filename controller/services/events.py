"""Emit an event: queue it for every webhook subscribed to it and log one line, inside the
caller's transaction (both happen only if it commits).

Event names (API.md plus the ones c4 adds): `alarm.opened`, `alarm.resolved`,
`host.isolated`, `host.released`, `job.planned` (a job's first plan is stored),
`job.restart_requested`, `job.replanned`, `job.failed` (a job lost its plan: no path between
two of its ranks, or its plan could not be stored), `link.state_changed` (a link was set
up, down or drained; with how many assignments that rewrote).

A delivery body is `{"id": "ev-...", "event": ..., "at_us": ..., "at": "<ISO 8601>",
"data": {...}}`; `id` is unique per event (the same for every subscriber and every retry), so
receivers can drop duplicates. Each subscription receives its events in the order they were
emitted (`services.webhooks`).

`job.planned` data: `job`, `version`, `plan` (the summary as written; its
`ecmp_predicted_busbw_fraction` is null for a job planned in a batch, and no later event
carries the figure the summary refresh fills in: `planning`, README "Jobs under churn").

`job.replanned` data: `job`, `version`, `reason`, `changed_flows` (the job's flows whose
assignment changed: path, NIC ports, source port or weight) and `moved_flows` (those whose
path changed); a link change's `replanned_flows` (PATCH response, `link.state_changed`) is
the sum of its events' `changed_flows`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy.orm import Session

from controller.services import eventlog
from controller.services.clock import iso8601
from controller.store import outbox_repo

EVENTS = ("alarm.opened", "alarm.resolved", "host.isolated", "host.released", "job.planned",
          "job.restart_requested", "job.replanned", "job.failed", "link.state_changed")


def new_event_id() -> str:
    return f"ev-{uuid.uuid4().hex}"


def emit(session: Session, event: str, data: dict[str, Any], now_us: int) -> int:
    """Queue `event` for its subscribers and log it; returns how many deliveries were queued."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}")
    event_id = new_event_id()
    body = json.dumps({"id": event_id, "event": event, "at_us": now_us, "at": iso8601(now_us), "data": data},
                      separators=(",", ":"), sort_keys=True)
    hooks = outbox_repo.subscribers(session, event)
    for hook in hooks:
        outbox_repo.enqueue(session, hook.id, event, body, now_us)
    eventlog.after_commit(session, event, **log_fields(event, data), event_id=event_id)
    return len(hooks)


def _first_suspect(alarm: dict[str, Any]) -> str | None:
    suspects = alarm.get("suspects") or []
    return f"{suspects[0]['kind']}:{suspects[0]['name']}" if suspects else None


def log_fields(event: str, data: dict[str, Any]) -> dict[str, Any]:
    """The figures of an event that its log line shows (never secrets)."""
    if event.startswith("alarm."):
        alarm = data.get("alarm") or {}
        out = {"alarm": alarm.get("id"), "job": alarm.get("job"), "kind": alarm.get("kind"),
               "first_suspect": _first_suspect(alarm)}
        if event == "alarm.resolved":
            out["by"] = alarm.get("resolved_by")
        else:
            out["summary"] = (alarm.get("evidence") or {}).get("summary")
        return out
    if event == "job.planned":
        plan = data.get("plan") or {}
        return {"job": data.get("job"), "version": data.get("version"),
                **{k: plan.get(k) for k in ("flows", "max_link_utilization", "lower_bound",
                                            "ecmp_expected_max_utilization", "solve_ms", "solver")}}
    return {k: v for k, v in data.items() if isinstance(v, str | int | float | bool | list) or v is None}
