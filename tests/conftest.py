"""Shared fixtures: a migrated database per backend (SQLite always, PostgreSQL when
`C4_TEST_DATABASE_URL` names one, as `make test` does) and API clients on it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from controller.api.app import create_app
from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store import tokens_repo
from controller.store.db import make_engine, transaction
from controller.store.migrate import upgrade
from controller.store.tables import Base

# The tests' webhook receivers listen on loopback, which a controller refuses to deliver to
# unless allow-listed (services/destinations.py); tests of that policy set the setting themselves.
os.environ.setdefault("C4_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")

ADMIN_TOKEN = "test-admin-token"
PG_URL = os.environ.get("C4_TEST_DATABASE_URL")
BACKENDS = ["sqlite", "postgresql"]


def _reset_postgres(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(scope="session")
def _pg_migrated() -> str:
    assert PG_URL
    _reset_postgres(PG_URL)
    upgrade(PG_URL)
    return PG_URL


@pytest.fixture(scope="session")
def _sqlite_migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "c4.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database on each backend."""
    if request.param == "sqlite":
        # a copy of one database migrated per session (a migration per test cost ~0.2 s x 188)
        with sqlite3.connect(request.getfixturevalue("_sqlite_migrated")) as src, \
                sqlite3.connect(tmp_path / "c4.db") as dst:
            src.backup(dst)
        yield f"sqlite:///{tmp_path / 'c4.db'}"
        return
    if not PG_URL:
        pytest.skip("PostgreSQL tier: C4_TEST_DATABASE_URL is not set (make test starts a server and sets it)")
    url = request.getfixturevalue("_pg_migrated")
    engine = make_engine(url)
    with engine.begin() as conn:
        names = ", ".join(t.name for t in Base.metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()
    yield url


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=database_url, data_dir=tmp_path, admin_token=ADMIN_TOKEN,
                    detector_interval_s=0.2, webhook_backoff_s=0.05, webhook_max_attempts=4,
                    hang_timeout_s=3.0)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    rt = Runtime.from_settings(settings)
    yield rt
    rt.engine.dispose()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    """An API client with the admin token; workers run as in production."""
    with TestClient(create_app(runtime=runtime), headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        yield c


@pytest.fixture
def token_for(runtime: Runtime):  # type: ignore[no-untyped-def]
    """Make a token of a role: `token_for("viewer")` -> auth headers."""

    def make(role: str) -> dict[str, str]:
        with transaction(runtime.sessions) as session:
            _, value = tokens_repo.create(session, f"test-{role}", role, now_us())
        return {"Authorization": f"Bearer {value}"}

    return make
