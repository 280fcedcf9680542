"""Assignment long-polls without a query per waiting poll (issue 18).

One `VersionWatch` per app (process): a waiting poll registers (job, the version it has seen)
and awaits a future; one task reads the versions of every job some poll waits on in ONE query
per `POLL_S` tick (`services.jobs.versions_of`) and wakes the polls whose job moved past their
version or is gone. A version bumped in this process (the planner's writes, when this process
leads) wakes the task at once (`Runtime.version_watchers`), so it answers without waiting for
the tick; other processes' writes are seen at the next tick (<= `POLL_S` late). Works alike on
SQLite and PostgreSQL. Decision (README Decisions "Long-polls"): a batched read per tick,
not LISTEN/NOTIFY: its cost is one indexed query per tick per process whatever the number of
waiting polls, it needs no dedicated connection, and SQLite (the embedded default) has no
NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.concurrency import run_in_threadpool

from controller.services import jobs
from controller.services.runtime import Runtime

log = logging.getLogger(__name__)
POLL_S = jobs.POLL_S


class VersionWatch:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._waiters: dict[str, list[tuple[int, asyncio.Future[None]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._kick: asyncio.Event | None = None
        self.reads = 0  # batched version reads so far (tests)
        rt.version_watchers.append(self.poke)

    async def wait(self, name: str, after: int, timeout_s: float) -> None:
        """Return once job `name`'s version is above `after` (or it is gone), or after
        `timeout_s`."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.setdefault(name, []).append((after, fut))
        if self._loop is not loop or self._kick is None:
            self._loop, self._kick, self._task = loop, asyncio.Event(), None
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            waiting = self._waiters.get(name, [])
            waiting[:] = [w for w in waiting if w[1] is not fut]
            if not waiting:
                self._waiters.pop(name, None)

    def waiting(self, name: str) -> int:
        """How many polls wait on job `name` now."""
        return len(self._waiters.get(name, ()))

    def poke(self) -> None:
        """A version may have changed (any thread): read at once."""
        loop, kick = self._loop, self._kick
        if loop is not None and kick is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
                loop.call_soon_threadsafe(kick.set)

    async def _run(self) -> None:
        kick = self._kick
        assert kick is not None
        while self._waiters:
            kick.clear()
            names = sorted(self._waiters)
            try:
                versions = await run_in_threadpool(jobs.versions_of, self.rt, names)
                self.reads += 1
            except Exception as exc:  # the database is away: the polls time out or retry
                log.warning("reading %d job versions failed: %s", len(names), exc)
                versions = None
            if versions is not None:
                for name in names:
                    v = versions.get(name)
                    for after, fut in self._waiters.get(name, ()):
                        if (v is None or v > after) and not fut.done():
                            fut.set_result(None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kick.wait(), POLL_S)


def watch_of(app_state: object, rt: Runtime) -> VersionWatch:
    watch = getattr(app_state, "version_watch", None)
    if watch is None:
        watch = VersionWatch(rt)
        app_state.version_watch = watch  # type: ignore[attr-defined]
    return watch
