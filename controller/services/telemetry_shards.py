"""Ownership of the telemetry shards among replicas sharing one PostgreSQL.

A job's telemetry belongs to shard `crc32(job) % shards`; a host's liveness (its agent's
heartbeats, its telemetry gap) to shard `crc32("host:" + host) % shards`. Each shard is owned
by exactly one replica: the one whose database session holds the shard's advisory lock
(store.telemetry_inbox_repo). Every poll a replica counts the replicas (a shared advisory lock
each holds), aims at `ceil(shards / replicas)` shards, releases those past its aim (highest
first) and takes free ones up to it. Locks end with the session, so when a replica dies
(kill -9 included) PostgreSQL frees its shards as soon as the connection closes, and the
others take them at their next poll (the detectors' interval). What the replicas must agree
on is only the shard function and the shard count (`C4_TELEMETRY_SHARDS`, same everywhere).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import zlib

from prometheus_client import Gauge
from sqlalchemy import Connection

from controller.services.runtime import Runtime
from controller.store import telemetry_inbox_repo as inbox

log = logging.getLogger(__name__)

OWNED = Gauge("c4_telemetry_shards_owned", "Telemetry shards whose detectors run in this process")
REPLICAS = Gauge("c4_telemetry_replicas", "Replicas sharing the telemetry shards (PostgreSQL)")


def job_shard(job: str, shards: int) -> int:
    return zlib.crc32(job.encode()) % shards


def host_shard(host: str, shards: int) -> int:
    return zlib.crc32(b"host:" + host.encode()) % shards


def replica_name() -> str:
    return f"c4:{socket.gethostname()}:{os.getpid()}"


class ShardOwnership:
    """This replica's shards; `poll` rebalances and returns (gained, lost)."""

    def __init__(self, rt: Runtime, shards: int, name: str | None = None) -> None:
        self.rt = rt
        self.count = shards
        self.name = name or replica_name()
        self.owned: set[int] = set()
        self.replicas = 0
        self._conn: Connection | None = None

    def poll(self) -> tuple[set[int], set[int]]:
        try:
            return self._poll()
        except Exception:
            lost = set(self.owned)
            self.drop()
            if lost:
                log.warning("telemetry shards: database session lost; released %d shards", len(lost))
            raise

    def _poll(self) -> tuple[set[int], set[int]]:
        conn = self._conn
        if conn is None:
            conn = self.rt.engine.connect()
            try:
                inbox.name_connection(conn, self.name)
                inbox.join(conn)
                conn.commit()
            except Exception:
                conn.invalidate()
                conn.close()
                raise
            self._conn = conn
        self.replicas = max(1, inbox.members(conn))
        aim = math.ceil(self.count / self.replicas)
        lost: set[int] = set()
        for shard in sorted(self.owned, reverse=True)[:max(0, len(self.owned) - aim)]:
            inbox.release(conn, shard)
            lost.add(shard)
        self.owned -= lost
        gained: set[int] = set()
        if len(self.owned) < aim:
            held = inbox.owners(conn)
            # Start from a point of our own, so replicas starting together do not all race for shard 0.
            start = zlib.crc32(self.name.encode()) % self.count
            for i in range(self.count):
                shard = (start + i) % self.count
                if len(self.owned) + len(gained) >= aim:
                    break
                if shard not in held and shard not in self.owned and inbox.try_take(conn, shard):
                    gained.add(shard)
        self.owned |= gained
        conn.commit()
        OWNED.set(len(self.owned))
        REPLICAS.set(self.replicas)
        return gained, lost

    def owners(self) -> dict[int, str]:
        """Shard -> owning replica's name, read on a connection of its own (any thread)."""
        with self.rt.engine.connect() as conn:
            return inbox.owners(conn)

    def drop(self) -> None:
        """End the session: every shard is released at once (shutdown, or a lost connection)."""
        self.owned = set()
        OWNED.set(0)
        if self._conn is not None:
            try:
                self._conn.invalidate()  # the locks belong to the session: never back to the pool
                self._conn.close()
            except Exception:
                log.debug("closing the shard connection failed", exc_info=True)
            self._conn = None
