"""What every use case needs: settings, the database, the fabric cache and extension hooks.

One `Runtime` per process. Hooks let later parts (the planner, the detectors) react to
changes inside the same transaction without the topology service knowing them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from controller.domain.fabric import Fabric, LinkState
from controller.services import collector
from controller.services.workers import PeriodicWorker
from controller.settings import Settings
from controller.store import fabric_repo
from controller.store.db import make_engine, make_sessions
from controller.store.tables import JobRow
from controller.topology.graph import FabricView

# (session, fabric after the change, link name, new state) -> flows re-planned
LinkChangeHook = Callable[[Session, Fabric, str, LinkState], int]
# (session, new fabric) -> None; called when PUT replaces the fabric with force=true
FabricReplacedHook = Callable[[Session, Fabric], None]
# (session, posted job's row, deleted job's row) -> None; called inside a job POST's or
# DELETE's transaction, after the fabric's lock and before the commit (the planner counts the
# job's flows per NIC in or out and advances the bound epoch); a deleted job's row is still
# stored
JobsChangedHook = Callable[[Session, JobRow | None, JobRow | None], None]
# () -> None; asks background workers to look at the database again
WakeHook = Callable[[], None]


class FabricCache:
    """The current fabric and its graph view, reloaded when the stored revision changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._revision: int | None = None
        self._fabric: Fabric | None = None
        self._view: FabricView | None = None

    def get(self, session: Session) -> tuple[Fabric, FabricView] | None:
        got = self.current(session)
        return None if got is None else (got[1], got[2])

    def current(self, session: Session) -> tuple[int, Fabric, FabricView] | None:
        """The stored revision with exactly its fabric and view (None: no fabric stored)."""
        rev = fabric_repo.revision(session)
        if rev is None:
            return None
        with self._lock:
            if rev == self._revision and self._fabric is not None and self._view is not None:
                return rev, self._fabric, self._view
        # The rows are read by several statements; a change committed between them would mix
        # two fabrics, so a load counts only if the revision is the same after it. A fabric is
        # millions of objects that live until the next one: built with the collector paused and
        # then frozen, or each full collection would scan it all (services.collector).
        with collector.lasting():
            for _ in range(5):
                loaded = fabric_repo.load_fabric(session)
                if loaded is None:
                    return None  # (the fabric went between two reads: rare; the freeze is harmless)
                fabric, rev = loaded
                if fabric_repo.revision(session) == rev:
                    break
            view = FabricView(fabric)
            with self._lock:
                self._revision, self._fabric, self._view = rev, fabric, view
        return rev, fabric, view

    def at(self, revision: int) -> Fabric | None:
        """The cached fabric if it is exactly `revision`, else None."""
        with self._lock:
            return self._fabric if self._revision == revision else None

    def put(self, revision: int, fabric: Fabric) -> None:
        with self._lock:
            self._revision, self._fabric, self._view = revision, fabric, FabricView(fabric)


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    fabric_cache: FabricCache = field(default_factory=FabricCache)
    on_link_change: list[LinkChangeHook] = field(default_factory=list)
    on_fabric_replaced: list[FabricReplacedHook] = field(default_factory=list)
    on_jobs_changed: list[JobsChangedHook] = field(default_factory=list)
    wake: list[WakeHook] = field(default_factory=list)
    # () -> None, from any thread: a job's assignment version changed in this process (wakes
    # the waiting long-polls, api.longpoll)
    version_watchers: list[WakeHook] = field(default_factory=list)
    workers: list[PeriodicWorker] = field(default_factory=list)
    leading: bool = False  # this process runs the background workers (see services.leader)
    # Probed mode: (src address, dst address) -> since when (µs) its probes are stale (a link
    # change re-hashed it: services.failover); agents are asked to probe it again at once.
    probe_stale: dict[tuple[str, str], int] = field(default_factory=dict)
    checks: list[Callable[[], dict[str, str]]] = field(default_factory=list)  # more /readyz lines

    @classmethod
    def from_settings(cls, settings: Settings) -> Runtime:
        engine = make_engine(settings.resolved_database_url())
        return cls(settings=settings, engine=engine, sessions=make_sessions(engine))

    def wake_workers(self) -> None:
        for hook in self.wake:
            hook()
        for worker in self.workers:
            worker.wake()

    def versions_changed(self) -> None:
        for hook in self.version_watchers:
            hook()

    def worker_status(self) -> dict[str, str]:
        return {w.name: w.status() for w in self.workers}
