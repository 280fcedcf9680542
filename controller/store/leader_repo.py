"""The leader's PostgreSQL session advisory lock, held on one connection for as long as the
process leads (it ends with the connection, kill -9 included)."""

from __future__ import annotations

from sqlalchemy import Connection, text


def try_lock(conn: Connection, key: int) -> bool:
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())


def ping(conn: Connection) -> None:
    """Raises if the connection (and with it the lock) is gone."""
    conn.execute(text("SELECT 1"))
