"""Webhook subscriptions and their delivery worker.

Every attempt carries these headers (the body is `services.events`' JSON, byte for byte):

- `X-C4-Signature: sha256=<hex HMAC-SHA256 of the body with the secret>` (API.md; kept for
  receivers that check it, but a captured delivery verified this way can be replayed);
- `X-C4-Timestamp: <unix seconds when this attempt was signed>` and
  `X-C4-Signature-V1: t=<that timestamp>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the secret>`:
  the replay-proof signature. A receiver recomputes v1, compares in constant time, and refuses
  a timestamp more than `SIGNATURE_TOLERANCE_S` (300 s) from its own clock (`verify` does all
  three);
- `X-C4-Event-Id: ev-...` (also the body's `id`): the same for every subscriber and retry of
  one event, so a receiver drops an id it has seen (keeping ids for the longest retry span,
  `webhook_max_attempts` attempts at up to 5 min apart, covers every retry);
- `X-C4-Event` (the event name) and `X-C4-Delivery` (this subscription's delivery id).

Destinations follow `services.destinations`' policy (no loopback, link-local, private or metadata
address unless allow-listed; no credentials in the URL): checked when a subscription is made and
again, on the resolved address, before every attempt, which connects to exactly that address.
Readers other than admin see a subscription's URL without user, password, query or fragment
(`eventlog.safe_url`), also inside `last_error`.

Deliveries are retried with exponential backoff (`webhook_backoff_s`, doubling, capped at
5 min) up to `webhook_max_attempts`, and sent from a background worker so they never block the
controller's work. Each subscription gets its events one at a time in the order they were
emitted (`host.isolated` before the `job.restart_requested` it caused): a delivery being
retried holds back that subscription's later ones until it succeeds or is given up. The outbox
is in the database, so a restart resumes pending deliveries.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client import Counter

from controller.domain.problems import Problem
from controller.services import destinations, eventlog
from controller.services.clock import now_us
from controller.services.errors import Invalid, NotFound
from controller.services.events import EVENTS
from controller.services.runtime import Runtime
from controller.services.workers import PeriodicWorker
from controller.store import outbox_repo, webhooks_repo
from controller.store.db import transaction
from controller.store.tables import WebhookRow

BACKOFF_CAP_S = 300.0
BATCH = 50
DELIVERIES = Counter("c4_webhook_deliveries_total", "Webhook delivery attempts by result", ["event", "result"])
SIGNATURE_TOLERANCE_S = 300


def signature(secret: str, body: bytes) -> str:
    """API.md's `X-C4-Signature` value: an HMAC of the body alone."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_v1(secret: str, body: bytes, timestamp_s: int) -> str:
    """The `X-C4-Signature-V1` value: an HMAC of `<timestamp>.<body>`, with the timestamp."""
    mac = hmac.new(secret.encode(), f"{timestamp_s}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp_s},v1={mac}"


def signed_headers(secret: str, body: bytes, timestamp_s: int) -> dict[str, str]:
    """The signature headers of one attempt (see the module docstring)."""
    return {"X-C4-Signature": signature(secret, body), "X-C4-Timestamp": str(timestamp_s),
            "X-C4-Signature-V1": signature_v1(secret, body, timestamp_s)}


def verify(secret: str, body: bytes, headers: Mapping[str, str], now_s: float,
           tolerance_s: float = SIGNATURE_TOLERANCE_S) -> str | None:
    """What a receiver checks: None if the delivery is authentic and fresh, else why not.

    `headers` is matched case-insensitively. Pair it with a set of seen `X-C4-Event-Id`s to
    drop duplicates and replays within the tolerance."""
    lower = {k.lower(): v for k, v in headers.items()}
    fields = dict(part.split("=", 1) for part in lower.get("x-c4-signature-v1", "").split(",") if "=" in part)
    if "t" not in fields or "v1" not in fields or not fields["t"].isdigit():
        return "missing or malformed X-C4-Signature-V1"
    expected = signature_v1(secret, body, int(fields["t"]))
    if not hmac.compare_digest(expected, f"t={fields['t']},v1={fields['v1']}"):
        return "signature mismatch"
    if abs(now_s - int(fields["t"])) > tolerance_s:
        return f"timestamp {fields['t']} is more than {tolerance_s:.0f} s from now"
    return None


def backoff_s(base_s: float, attempts: int) -> float:
    return float(min(BACKOFF_CAP_S, base_s * 2.0 ** max(0, attempts - 1)))


def public(row: WebhookRow, full: bool = True) -> dict[str, Any]:
    """A subscription as a reader sees it: `full` (admin) with its URL whole, else redacted."""
    return {"id": row.id, "url": row.url if full else eventlog.safe_url(row.url), "events": list(row.events),
            "created_at_us": row.created_at_us}


def allowed_networks(rt: Runtime) -> tuple[destinations.Network, ...]:
    return destinations.allowed_networks(rt.settings.webhook_allow_networks)


def create(rt: Runtime, url: str, events: list[str], secret: str) -> dict[str, Any]:
    unknown = [(i, e) for i, e in enumerate(events) if e not in EVENTS]
    if unknown:
        raise Invalid([Problem(("events", i), f"unknown event {e!r}; known: {', '.join(EVENTS)}") for i, e in unknown])
    try:
        destinations.check_url(url, allowed_networks(rt))
    except destinations.Refused as exc:
        raise Invalid([Problem(("url",), str(exc))]) from None
    with transaction(rt.sessions) as session:
        row = webhooks_repo.add(session, WebhookRow(url=url, events=sorted(set(events)), secret=secret,
                                                    created_at_us=now_us()))
        return public(row)


def list_all(rt: Runtime, full: bool = True) -> list[dict[str, Any]]:
    with rt.sessions() as session:
        return [public(r, full) for r in webhooks_repo.listed(session)]


def delete(rt: Runtime, webhook_id: int) -> None:
    with transaction(rt.sessions) as session:
        row = webhooks_repo.by_id(session, webhook_id)
        if row is None:
            raise NotFound(f"no webhook with id {webhook_id}")
        webhooks_repo.delete(session, row)


def deliveries(rt: Runtime, webhook_id: int, full: bool = True) -> list[dict[str, Any]]:
    with rt.sessions() as session:
        hook = webhooks_repo.by_id(session, webhook_id)
        if hook is None:
            raise NotFound(f"no webhook with id {webhook_id}")
        url, safe = hook.url, eventlog.safe_url(hook.url)

        def error(text: str | None) -> str | None:
            return text if full or text is None else text.replace(url, safe)

        rows = webhooks_repo.deliveries(session, webhook_id, 100)
        return [{"id": r.id, "event": r.event, "attempts": r.attempts, "created_at_us": r.created_at_us,
                 "delivered_at_us": r.delivered_at_us, "failed_at_us": r.failed_at_us,
                 "next_attempt_at_us": None if r.delivered_at_us or r.failed_at_us else r.next_attempt_at_us,
                 "last_error": error(r.last_error)} for r in rows]


class Deliverer:
    """Sends due outbox rows; one instance per process, run by a `PeriodicWorker`."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        eventlog.quiet_secret_bearing_loggers()  # httpx would log each URL, credentials and all
        self.client = httpx.Client(timeout=rt.settings.webhook_timeout_s, follow_redirects=False)
        self.worker = PeriodicWorker("webhooks", 0.5, self.deliver_due)

    def deliver_due(self) -> int:
        """Attempt every due delivery once; returns how many were attempted."""
        now = now_us()
        with self.rt.sessions() as session:
            rows = [(r.id, r.next_attempt_at_us) for r in outbox_repo.due(session, now, BATCH)]
        attempted = 0
        for row_id, seen in rows:
            lease = now_us() + int((self.rt.settings.webhook_timeout_s + 5) * 1e6)
            with transaction(self.rt.sessions) as session:
                if not outbox_repo.claim(session, row_id, seen, lease):
                    continue
                row = outbox_repo.by_id(session, row_id)
                hook = webhooks_repo.by_id(session, row.webhook_id) if row else None
                if row is None or hook is None:
                    continue
                url, secret, body, event = hook.url, hook.secret, row.body.encode(), row.event
            error = self._send(url, secret, body, event, row_id)
            attempted += 1
            self._record(row_id, error, event, url)
        return attempted

    def _send(self, url: str, secret: str, body: bytes, event: str, row_id: int) -> str | None:
        try:
            scheme, host, address = destinations.resolve_checked(url, allowed_networks(self.rt))
        except destinations.Refused as exc:
            return f"destination refused: {exc}"[:300]
        netloc = urlsplit(url).netloc.rsplit("@", 1)[-1]
        headers = {"Content-Type": "application/json", **signed_headers(secret, body, int(time.time())),
                   "X-C4-Event": event, "X-C4-Delivery": str(row_id), "X-C4-Event-Id": _event_id(body),
                   "Host": netloc}
        extensions = {"sni_hostname": host} if scheme == "https" else {}
        try:  # to the address that was checked, never to a second resolution of the name
            response = self.client.post(destinations.pinned(url, address), content=body, headers=headers,
                                        extensions=extensions)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"[:300]
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"

    def _record(self, row_id: int, error: str | None, event: str, url: str) -> None:
        now = now_us()
        with transaction(self.rt.sessions) as session:
            row = outbox_repo.by_id(session, row_id)
            if row is None:
                return
            row.attempts += 1
            row.last_error = error
            if error is None:
                row.delivered_at_us = now
                DELIVERIES.labels(event, "delivered").inc()
            elif row.attempts >= self.rt.settings.webhook_max_attempts:
                row.failed_at_us = now
                DELIVERIES.labels(event, "gave_up").inc()
                eventlog.after_commit(session, "webhook.given_up", logging.WARNING, delivery=row_id,
                                      webhook=row.webhook_id, url=eventlog.safe_url(url), event_name=event,
                                      event_id=_event_id(row.body.encode()), attempts=row.attempts,
                                      error=error.replace(url, eventlog.safe_url(url)))
            else:
                row.next_attempt_at_us = now + int(backoff_s(self.rt.settings.webhook_backoff_s, row.attempts) * 1e6)
                DELIVERIES.labels(event, "retry").inc()

    def close(self) -> None:
        self.client.close()


def _event_id(body: bytes) -> str:
    """The event id inside a stored body (bodies queued before ids existed have none)."""
    try:
        value = json.loads(body).get("id")
    except (ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""
