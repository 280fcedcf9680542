"""Assignment reads and long-polls without a query per read (issue 18).

One `VersionWatch` per app (process). It reads the (id, version, status) of every job some poll
waits on or some cached document belongs to in ONE query per `POLL_S` tick
(`services.jobs.heads_of`), wakes the waiting polls whose job moved past their version or is
gone, and keeps each (job, host)'s assignments document serialized, keyed by the (id, version,
status) it was read at. A read is answered from that cache, with no query and no thread, while
the last batched read began less than `FRESH_S` ago, saw the same (id, version, status), and no
version changed in this process since it began, or (a job just read into the cache, before a
batched read has covered it) its own fill began less than `FRESH_S` ago with no version changed
in this process since: the fill's read is as recent as a batched read would be, and without it
every read of a cold job until the next batched read started another fill (a cold start's first
0.3-0.5 s under 1,000 reads/s, bench/README "load (planner)"). An entry that only lacks a fresh enough read
(a busy process's tick came late, or a local change) waits for the next batched read, shared by
all such reads; a miss reads the database and caches every host's document of the job at
once, in a batch with the other jobs whose reads miss meanwhile (one thread and three queries
per batch, whatever the number of jobs: a cold cache under many agents misses on every job at
once). A version bumped in this process (the planner's
writes, a DELETE: `Runtime.version_watchers`) makes every cached document unservable until a
read that began after it, and wakes the task at once; other processes' writes are seen at the
next tick. So a read may answer a document up to `FRESH_S` (+ one query) older than another
process's write, as a read sent that much earlier would have: the same bound a waiting poll
already had for its wake-up. Works alike on SQLite and PostgreSQL.

Decisions (README Decisions "Long-polls"): a batched read per tick, not LISTEN/NOTIFY: its cost
is one indexed query per tick per process whatever the number of waiting polls and readers, it
needs no dedicated connection, and SQLite (the embedded default) has no NOTIFY. The cache holds
at most `CACHE_BYTES` (cleared whole past that) and forgets a job nobody read for `IDLE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import threading
import time
import urllib.parse
from typing import Any

import pydantic_core
from prometheus_client import Counter
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from controller.api.auth import Requirement, TokenCache, bearer_of
from controller.api.schemas.common import INT32_MAX
from controller.services import jobs
from controller.services.runtime import Runtime
from controller.store.jobs_repo import JobState

log = logging.getLogger(__name__)
READS = Counter("c4_assignment_reads_total", "Assignment documents answered, by where from: the process's cache "
                "(no query) or the database", ["source"])
POLL_S = jobs.POLL_S
FRESH_S = 2 * POLL_S  # a cached document is served only while the last batched read is this recent
CACHE_BYTES = 64 << 20
IDLE_S = 30.0


class VersionWatch:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._waiters: dict[str, list[tuple[int, asyncio.Future[None]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._kick: asyncio.Event | None = None
        self._heads: dict[str, JobState] = {}  # as the last batched read saw them
        self._read_at = float("-inf")  # when the last completed batched read began (monotonic)
        self._pokes_lock = threading.Lock()
        self._pokes = 0  # versions changed in this process (any thread)
        self._pokes_read = 0  # ... as counted when the last completed batched read began
        self._cache: dict[tuple[str, str | None], tuple[JobState, bytes]] = {}
        self._used: dict[str, float] = {}  # job -> when a cached document of it was last stored or served
        self._bytes = 0
        self._readers: list[asyncio.Future[None]] = []  # reads awaiting the next batched read
        # job -> the database read of its documents in flight, and what it began from
        self._fills: dict[str, tuple[tuple[JobState | None, int], asyncio.Future[Any]]] = {}
        # per event loop, batches of fills for one read of their documents each (`_batched`)
        self._batches: dict[asyncio.AbstractEventLoop, list[tuple[set[str], asyncio.Future[Any]]]] = {}
        self._batch_readers: set[asyncio.Future[None]] = set()
        # job -> (head its last fill read, when that fill began (monotonic), versions changed in this
        # process then): servable as a batched read of the job would be, until one covers it
        self._filled: dict[str, tuple[JobState, float, int]] = {}
        self.reads = 0  # batched version reads so far (tests)
        self.hits = 0  # reads answered from the cache (tests)
        rt.version_watchers.append(self.poke)

    def cached(self, name: str, host: str | None) -> tuple[int, bytes] | None:
        """(version, JSON body) of job `name`'s assignments (of flows sourced on `host`) from
        the cache, if it holds them and they are current (module docstring); else None."""
        entry = self._cache.get((name, host))
        if entry is None or not self._servable(name, entry[0]):
            return None
        self.hits += 1
        READS.labels("cache").inc()
        self._used[name] = time.monotonic()
        return entry[0].version, entry[1]

    async def document(self, name: str, host: str | None) -> tuple[int, bytes]:
        """`cached`; else, when the cache holds the document as the last batched read saw the
        job but that read is no longer fresh enough (a busy process's tick came late), `cached`
        after the next batched read, which every such read shares (one query for all of them,
        not one each: under load the cache must not fall back to a query per read); else read
        from the database and cached (NotFound if there is no such job)."""
        got = self.cached(name, host)
        if got is not None:
            return got
        entry = self._cache.get((name, host))
        if entry is not None and self._heads.get(name) == entry[0]:
            await self._next_read()
            got = self.cached(name, host)
            if got is not None:
                return got
        # Every host's document of the job at once (its agents read after the same change),
        # and one such read per job at a time: the reads that miss meanwhile share it, unless
        # the job changed since it began (as this process last saw the job)
        since = (self._heads.get(name), self._pokes)
        fill = self._fills.get(name)
        if fill is None or fill[0] != since:
            task = asyncio.ensure_future(self._fill(name, since[1]))
            fill = self._fills[name] = (since, task)
            task.add_done_callback(functools.partial(self._fill_done, name))
        head, docs, bodies = await asyncio.shield(fill[1])
        body = bodies.get(host)
        if body is None:  # a host that sources none of the job's flows
            body = pydantic_core.to_json({**docs[None], "assignments": []})
            self._store(name, host, head, body)
        return head.version, body

    def _fill_done(self, name: str, task: asyncio.Future[Any]) -> None:
        if name in self._fills and self._fills[name][1] is task:
            del self._fills[name]
        if not task.cancelled():
            task.exception()  # retrieved: a NotFound that every sharer already got is no news

    async def _fill(self, name: str, pokes: int) -> tuple[JobState, dict[str | None, Any], dict[str | None, bytes]]:
        began = time.monotonic()  # the read below begins after this and after `pokes` were counted
        got = await self._batched(name)
        if got is not None:
            head, docs = got
        else:  # not in the batch's read: gone, or it kept changing; its own read says which
            head, docs = await run_in_threadpool(jobs.assignments_by_host, self.rt, name)
        READS.labels("database").inc()
        filled = self._filled.get(name)
        if filled is None or filled[1] <= began:
            self._filled[name] = (head, began, pokes)
        bodies = {}
        for key, doc in docs.items():
            bodies[key] = encoded = pydantic_core.to_json(doc)
            self._store(name, key, head, encoded)
        return head, docs, bodies

    async def _batched(self, name: str) -> tuple[JobState, dict[str | None, Any]] | None:
        """Job `name`'s documents read with those of every other job whose fill begins while
        the batch before is in flight: one thread and three queries for all of them
        (`jobs.assignments_by_host_many`), not one thread and three queries each. A cold cache
        under many agents misses on every job at once; read one by one, the first second's
        reads waited up to 1.4 s for the fills (bench/README "load (planner)"). A name joins
        only a batch that has not begun its read, so what it gets was read after its miss.
        None if the batch's read left it out (gone, or changing: see the callee) or failed (one
        job's bad row must not fail the others: each then reads alone)."""
        loop = asyncio.get_running_loop()
        queue = self._batches.get(loop)
        if queue is None:  # no reader on this loop: start one
            queue = self._batches[loop] = []
            reader = asyncio.ensure_future(self._read_batches(loop, queue))
            self._batch_readers.add(reader)
            reader.add_done_callback(self._batch_readers.discard)
        if not queue:  # nothing waits to begin: a new batch
            queue.append((set(), loop.create_future()))
        names, fut = queue[-1]
        names.add(name)
        got: dict[str, tuple[JobState, dict[str | None, Any]]] = await asyncio.shield(fut)
        return got.get(name)

    async def _read_batches(self, loop: asyncio.AbstractEventLoop,
                            queue: list[tuple[set[str], asyncio.Future[Any]]]) -> None:
        """Read the waiting batch, then the one that gathered while it was read, until none waits."""
        try:
            await asyncio.sleep(0)  # the misses of this turn of the loop join the first batch
            while queue:
                names, fut = queue.pop(0)  # (its result is a dict, never an exception: a failure is {})
                try:
                    fut.set_result(await run_in_threadpool(jobs.assignments_by_host_many, self.rt, sorted(names)))
                except asyncio.CancelledError:
                    fut.cancel()
                    raise
                except Exception as exc:  # every job reads alone then, and gets its own answer or error
                    log.warning("a batched read of %d jobs' assignments failed: %r", len(names), exc)
                    fut.set_result({})
        finally:
            if self._batches.get(loop) is queue:
                del self._batches[loop]
            for _, waiting in queue:  # (stopped: the loop is closing) no sharer waits for ever
                waiting.cancel()

    async def _next_read(self) -> None:
        """Return after the next batched read that begins from now on has completed (or failed)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._readers.append(fut)
        self._start()
        assert self._kick is not None
        self._kick.set()
        await fut

    def _servable(self, name: str, head: JobState) -> bool:
        now = time.monotonic()
        if (self._heads.get(name) == head and self._pokes_read == self._pokes
                and now - self._read_at < FRESH_S):
            return True
        filled = self._filled.get(name)
        return (filled is not None and filled[0] == head and filled[2] == self._pokes
                and now - filled[1] < FRESH_S)

    def _store(self, name: str, host: str | None, head: JobState, body: bytes) -> None:
        old = self._cache.get((name, host))
        self._bytes += len(body) - (len(old[1]) if old is not None else 0)
        if self._bytes > CACHE_BYTES:
            self._cache.clear()
            self._used.clear()
            self._filled.clear()
            self._bytes = len(body)
        self._cache[(name, host)] = (head, body)
        watched = name in self._used or name in self._waiters
        self._used[name] = time.monotonic()
        self._start()
        if not watched and self._kick is not None:
            self._kick.set()  # read its head now: the cache serves it from then on

    async def wait(self, name: str, after: int, timeout_s: float) -> None:
        """Return once job `name`'s version is above `after` (or it is gone), or after
        `timeout_s`."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(name, []).append((after, fut))
        self._start()
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            waiting = self._waiters.get(name, [])
            waiting[:] = [w for w in waiting if w[1] is not fut]
            if not waiting:
                self._waiters.pop(name, None)

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._kick is None:
            self._loop, self._kick, self._task = loop, asyncio.Event(), None
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())

    def waiting(self, name: str) -> int:
        """How many polls wait on job `name` now."""
        return len(self._waiters.get(name, ()))

    def poke(self) -> None:
        """A version changed in this process (any thread): no cached document is served until
        a read that begins after this; read at once."""
        with self._pokes_lock:
            self._pokes += 1
        loop, kick = self._loop, self._kick
        if loop is not None and kick is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile)
                loop.call_soon_threadsafe(kick.set)

    def _forget_idle(self, now: float) -> None:
        idle = {n for n, at in self._used.items() if now - at > IDLE_S}
        if idle:
            for key in [k for k in self._cache if k[0] in idle]:
                self._bytes -= len(self._cache.pop(key)[1])
            for n in idle:
                del self._used[n]
                self._filled.pop(n, None)

    async def _run(self) -> None:
        kick = self._kick
        assert kick is not None
        while self._waiters or self._used or self._readers:
            kick.clear()
            readers, self._readers = self._readers, []
            started = time.monotonic()
            self._forget_idle(started)
            names = sorted(self._waiters.keys() | self._used.keys())
            pokes = self._pokes
            try:
                heads = await run_in_threadpool(jobs.heads_of, self.rt, names)
                self.reads += 1
            except Exception as exc:  # the database is away: the polls time out or retry
                log.warning("reading %d job versions failed: %s", len(names), exc)
                heads = None
            if heads is not None:
                self._heads, self._read_at, self._pokes_read = heads, started, pokes
                for name in names:  # this read is as recent as their fills: it decides from now on
                    filled = self._filled.get(name)
                    if filled is not None and filled[1] <= started:
                        del self._filled[name]
                for name in names:
                    head = heads.get(name)
                    for after, fut in self._waiters.get(name, ()):
                        if (head is None or head.version > after) and not fut.done():
                            fut.set_result(None)
            for fut in readers:
                if not fut.done():
                    fut.set_result(None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kick.wait(), POLL_S)


class AssignmentReads:
    """ASGI middleware: the agents' hot read, `GET /v1/jobs/{name}/assignments`, answered from
    the process's `VersionWatch` cache without FastAPI's routing and dependency solving (in
    process: ~0.5 ms a read through them, most of it matching the path against every route and
    solving the parameters' annotations; ~0.1 ms here). Only when it can answer at once
    exactly what the route would: a cached token whose role may read assignments, query
    parameters among `host`, `after_version`, `wait_s`, each once and within the route's
    bounds, a current cached document (which only the route stores, so the job name and host
    were validated there), and no wait asked for beyond its version. Anything else (a miss, a
    wait, a bad parameter, a 401/403, a 404) goes to the route unchanged, which answers and
    validates it as before."""

    PATH = re.compile(r"/v1/jobs/([^/]+)/assignments")

    def __init__(self, app: ASGIApp, requirement: Requirement, route: object) -> None:
        self.app = app
        self.requirement = requirement
        self.route = route  # set in the scope: request metrics label the read by its route
        self.answered = 0  # (tests)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            match = self.PATH.fullmatch(scope["path"])
            if match is not None:
                body = self._cached(scope, match.group(1))
                if body is not None:
                    scope["route"] = self.route
                    self.answered += 1
                    await send({"type": "http.response.start", "status": 200,
                                "headers": [(b"content-length", str(len(body)).encode()),
                                            (b"content-type", b"application/json")]})
                    await send({"type": "http.response.body", "body": body})
                    return
        await self.app(scope, receive, send)

    def _cached(self, scope: Scope, name: str) -> bytes | None:
        state = scope["app"].state
        watch: VersionWatch | None = getattr(state, "version_watch", None)
        if watch is None:
            return None
        params = _query(scope.get("query_string", b""))
        if params is None:
            return None
        host, after, wait_s = params
        auth = [v for k, v in scope.get("headers") or [] if k == b"authorization"]
        if len(auth) != 1:  # none, or several (the route's parser takes the first): the route
            return None
        token = bearer_of(auth[0].decode("latin-1"))
        if token is None:
            return None
        cache: TokenCache = state.token_cache
        known, role = cache.cached(state.runtime, token)
        if not known or role is None or not self.requirement.admits(role, "GET"):
            return None
        got = watch.cached(name, host)
        if got is None or (after is not None and wait_s > 0 and got[0] <= after):
            return None
        return got[1]


_PLAIN_NUMBER = re.compile(r"[0-9]{1,6}(\.[0-9]{1,9})?")


def _query(raw: bytes) -> tuple[str | None, int | None, float] | None:
    """(host, after_version, wait_s) when the query string holds only these, each at most once
    and within the route's bounds; else None (the route answers)."""
    try:
        pairs = urllib.parse.parse_qsl(raw.decode("latin-1"), keep_blank_values=True, strict_parsing=bool(raw))
    except ValueError:
        return None
    given = dict(pairs)
    if len(given) != len(pairs) or not given.keys() <= {"host", "after_version", "wait_s"}:
        return None
    host = given.get("host")
    after: int | None = None
    wait_s = 0.0
    if "after_version" in given:
        if not given["after_version"].isascii() or not given["after_version"].isdigit():
            return None
        after = int(given["after_version"])
        if after > INT32_MAX:
            return None
    if "wait_s" in given:
        if not _PLAIN_NUMBER.fullmatch(given["wait_s"]):  # anything else: the route validates it
            return None
        wait_s = float(given["wait_s"])
        if not 0.0 <= wait_s <= 60.0:  # (NaN fails both)
            return None
    if host is not None and host == "":
        return None
    return host, after, wait_s


def watch_of(app_state: object, rt: Runtime) -> VersionWatch:
    watch = getattr(app_state, "version_watch", None)
    if watch is None:
        watch = VersionWatch(rt)
        app_state.version_watch = watch  # type: ignore[attr-defined]
    return watch
