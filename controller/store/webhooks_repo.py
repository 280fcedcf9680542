"""Webhook subscriptions and their deliveries (the outbox rows: `outbox_repo` queues them)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controller.store.tables import OutboxRow, WebhookRow


def add(session: Session, row: WebhookRow) -> WebhookRow:
    session.add(row)
    session.flush()
    return row


def listed(session: Session) -> list[WebhookRow]:
    return list(session.scalars(select(WebhookRow).order_by(WebhookRow.id)))


def by_id(session: Session, webhook_id: int) -> WebhookRow | None:
    return session.get(WebhookRow, webhook_id)


def delete(session: Session, row: WebhookRow) -> None:
    session.delete(row)


def deliveries(session: Session, webhook_id: int, limit: int = 100) -> list[OutboxRow]:
    """A subscription's latest deliveries, newest first."""
    return list(session.scalars(select(OutboxRow).where(OutboxRow.webhook_id == webhook_id)
                                .order_by(OutboxRow.id.desc()).limit(limit)))
