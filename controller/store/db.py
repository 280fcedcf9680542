"""Engines and sessions for SQLite (embedded default) and PostgreSQL (psycopg 3)."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

# JSON columns refuse NaN and infinities on both backends (PostgreSQL's json rejects them at
# insert; SQLite stored them, and then its JSON functions failed on every later read of any
# row, e.g. `jobs_repo.planned_maxima`): a document with one fails its own write only.
_JSON = functools.partial(json.dumps, allow_nan=False)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               json_serializer=_JSON)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, json_serializer=_JSON)


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on any exception."""
    with sessions() as session, session.begin():
        yield session


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def ping(engine: Engine) -> str | None:
    """None if the database answers, else the reason it does not."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return None
    except OperationalError as exc:
        return str(exc.orig) if exc.orig else str(exc)
    except Exception as exc:
        return str(exc)


def wait_for(engine: Engine, attempts: int, delay_s: float = 1.0) -> None:
    """Bounded retries until the database answers (start-up step one)."""
    reason = None
    for _ in range(max(1, attempts)):
        reason = ping(engine)
        if reason is None:
            return
        time.sleep(delay_s)
    raise RuntimeError(f"database unreachable after {attempts} attempts: {reason}")
