"""Token use cases for the CLI and the API."""

from __future__ import annotations

from controller.services.clock import now_us
from controller.settings import Settings
from controller.store import tokens_repo
from controller.store.db import make_engine, make_sessions, transaction


def create(settings: Settings, name: str, role: str) -> str:
    engine = make_engine(settings.resolved_database_url())
    try:
        with transaction(make_sessions(engine)) as session:
            _, value = tokens_repo.create(session, name, role, now_us())
    finally:
        engine.dispose()
    return value
