"""API tokens: created with a random value shown once, stored as its SHA-256."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from controller.store.tables import ApiTokenRow

ROLES = ("admin", "scheduler", "agent", "viewer")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(session: Session, name: str, role: str, now_us: int) -> tuple[int, str]:
    """A new token; returns (id, the token's value). The value is not stored."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    value = "c4_" + secrets.token_urlsafe(32)
    row = ApiTokenRow(name=name, role=role, token_sha256=digest(value), created_at_us=now_us)
    session.add(row)
    session.flush()
    return row.id, value


def role_of(session: Session, token: str) -> str | None:
    row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_sha256 == digest(token)))
    if row is None or row.revoked_at_us is not None:
        return None
    return row.role


def list_tokens(session: Session) -> list[ApiTokenRow]:
    return list(session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.id)))


def get(session: Session, token_id: int) -> ApiTokenRow | None:
    return session.get(ApiTokenRow, token_id)


def revoke(session: Session, token_id: int, now_us: int) -> bool:
    row = session.get(ApiTokenRow, token_id)
    if row is None:
        return False
    row.revoked_at_us = now_us
    return True
