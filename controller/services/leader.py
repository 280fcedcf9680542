"""Leader election: one process at a time runs the background workers.

Several uvicorn workers (`c4 serve --workers N`) or replicas share one database; only the
leader plans, runs the detectors and delivers webhooks, so nothing is planned twice. The
lock is PostgreSQL's session advisory lock on a connection held open, or, on SQLite, an
`flock` on a file beside the database; both vanish with the process, so another process
takes over at its next attempt (every `RETRY_S`). Requests are served by every process.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import IO

from prometheus_client import Gauge
from sqlalchemy import Connection

from controller.services.runtime import Runtime
from controller.services.workers import PeriodicWorker
from controller.store import leader_repo

log = logging.getLogger(__name__)

RETRY_S = 2.0
ADVISORY_KEY = 0x6334_6C65_6164  # "c4lead"
LEADER = Gauge("c4_leader", "1 while this process runs the background workers")


class Leadership:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._file: IO[bytes] | None = None
        self._conn: Connection | None = None
        self.worker = PeriodicWorker("leader", RETRY_S, self.poll)

    def _lock_path(self) -> Path | None:
        url = self.rt.engine.url
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return None
        return Path(url.database).with_suffix(".leader")

    def _acquire(self) -> bool:
        if self.rt.engine.dialect.name == "postgresql":
            conn = self.rt.engine.connect()
            try:
                got = leader_repo.try_lock(conn, ADVISORY_KEY)
                conn.commit()
            except Exception:
                conn.close()
                raise
            if got:
                self._conn = conn
            else:
                conn.close()
            return got
        path = self._lock_path()
        if path is None:
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "ab")  # noqa: SIM115 - held open for as long as we lead
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.write(f"{os.getpid()}\n".encode())
        handle.flush()
        self._file = handle
        return True

    def _still_held(self) -> bool:
        if self._conn is None:
            return True
        try:
            leader_repo.ping(self._conn)
            self._conn.commit()
            return True
        except Exception:
            self._drop()
            return False

    def _drop(self) -> None:
        if self._conn is not None:
            # Invalidate rather than return it to the pool: the advisory lock belongs to the
            # database session and must end with it.
            try:
                self._conn.invalidate()
                self._conn.close()
            except Exception:
                log.debug("closing the leader connection failed", exc_info=True)
            self._conn = None
        if self._file is not None:
            self._file.close()  # closing the file releases the flock
            self._file = None

    def poll(self) -> None:
        """Become leader if nobody is; start or stop the background workers accordingly."""
        if self.rt.leading:
            if self._still_held():
                return
            log.warning("lost leadership (database connection gone); stopping background workers")
            self._set(False)
        try:
            acquired = self._acquire()
        except Exception as exc:
            raise RuntimeError(f"leader election: {exc}") from exc
        if acquired:
            self._set(True)

    def _set(self, leading: bool) -> None:
        # "this process" is shown only once the workers run, and no longer once they stop
        # (`/readyz` read between the two showed a leader whose planner was stopped)
        if not leading:
            self.rt.leading = False
            LEADER.set(0)
        for worker in self.rt.workers:
            if leading:
                worker.start()
            else:
                worker.stop()
        if leading:
            self.rt.leading = True
            LEADER.set(1)

    def start(self) -> None:
        self.worker.run_once()  # lead at once when nobody else does
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
        if self.rt.leading:
            self._set(False)
        self._drop()

    def status(self) -> str:
        return "this process" if self.rt.leading else "another process"
