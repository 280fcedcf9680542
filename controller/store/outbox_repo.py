"""Webhooks and their persisted delivery outbox.

An event is written to the outbox in the same transaction as the change it reports, so
either both happen or neither; a restart loses no delivery. Rows of one subscription are
delivered in id order (the order the events were emitted): a pending row holds back the
later rows of its subscription until it is delivered or given up.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from controller.store.tables import OutboxRow, WebhookRow


def subscribers(session: Session, event: str) -> list[WebhookRow]:
    return [w for w in session.scalars(select(WebhookRow).order_by(WebhookRow.id)) if event in w.events]


def by_id(session: Session, row_id: int) -> OutboxRow | None:
    return session.get(OutboxRow, row_id)


def enqueue(session: Session, webhook_id: int, event: str, body: str, now_us: int) -> None:
    session.add(OutboxRow(webhook_id=webhook_id, event=event, body=body, attempts=0,
                          next_attempt_at_us=now_us, created_at_us=now_us))


def due(session: Session, now_us: int, limit: int) -> list[OutboxRow]:
    """Deliveries to attempt now: of each subscription's pending deliveries only the oldest
    (a subscription receives its events in order), if it is due."""
    pending = (OutboxRow.delivered_at_us.is_(None), OutboxRow.failed_at_us.is_(None))
    heads = select(func.min(OutboxRow.id)).where(*pending).group_by(OutboxRow.webhook_id)
    return list(session.scalars(
        select(OutboxRow)
        .where(OutboxRow.id.in_(heads), OutboxRow.next_attempt_at_us <= now_us, *pending)
        .order_by(OutboxRow.next_attempt_at_us, OutboxRow.id)
        .limit(limit)
    ))


def claim(session: Session, row_id: int, seen_next_attempt_us: int, lease_until_us: int) -> bool:
    """Take a delivery for one attempt; False if another worker or replica took it first."""
    result = session.execute(
        update(OutboxRow)
        .where(OutboxRow.id == row_id, OutboxRow.next_attempt_at_us == seen_next_attempt_us,
               OutboxRow.delivered_at_us.is_(None))
        .values(next_attempt_at_us=lease_until_us)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def pending_count(session: Session) -> int:
    return int(session.scalar(
        select(func.count()).select_from(OutboxRow)
        .where(OutboxRow.delivered_at_us.is_(None), OutboxRow.failed_at_us.is_(None))
    ) or 0)
