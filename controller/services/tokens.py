"""Token use cases: create one for the CLI (on the database directly, to bootstrap), and list
and revoke them for the API (`GET /v1/tokens`, `POST /v1/tokens/{id}/revoke`, admin only).

A token's value is shown once at creation; only its SHA-256 is stored, and no listing, log
line or error ever carries either.
"""

from __future__ import annotations

from typing import Any

from controller.services.clock import now_us
from controller.services.errors import NotFound
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store import tokens_repo
from controller.store.db import make_engine, make_sessions, transaction
from controller.store.tables import ApiTokenRow


def create(settings: Settings, name: str, role: str) -> str:
    engine = make_engine(settings.resolved_database_url())
    try:
        with transaction(make_sessions(engine)) as session:
            _, value = tokens_repo.create(session, name, role, now_us())
    finally:
        engine.dispose()
    return value


def public(row: ApiTokenRow) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "role": row.role, "created_at_us": row.created_at_us,
            "revoked_at_us": row.revoked_at_us}


def list_all(rt: Runtime) -> list[dict[str, Any]]:
    with rt.sessions() as session:
        return [public(r) for r in tokens_repo.list_tokens(session)]


def revoke(rt: Runtime, token_id: int) -> dict[str, Any]:
    """Revoke a token (idempotent: a revoked token keeps its first revocation time)."""
    with transaction(rt.sessions) as session:
        row = tokens_repo.get(session, token_id)
        if row is None:
            raise NotFound(f"no token with id {token_id}", {"token": token_id})
        if row.revoked_at_us is None:
            tokens_repo.revoke(session, token_id, now_us())
        return public(row)
