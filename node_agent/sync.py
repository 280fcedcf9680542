"""Keeps the assignment cache current: which jobs have ranks on this host (the job list, read
every ``jobs_poll_s``), and each such job's assignments: a long-poll per job for the first
`MAX_LONG_POLLS` jobs (by name), so a version bump reaches the cache, and from there the live
connections, within the controller's poll period plus one HTTP round trip; jobs beyond those
(a host rarely runs more than a few) are fetched when the job list shows a new version, so
within ``jobs_poll_s``.

A job that disappears from the list (deleted) leaves the cache. While the controller is
away the cache keeps what it had: NCCL keeps getting the last known plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from node_agent.cache import AssignmentCache
from node_agent.controller_client import MAX_LONG_POLLS, ControllerClient
from node_agent.forwarder import Health
from node_agent.metrics import AgentMetrics

log = logging.getLogger("c4.agent.sync")
BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
ACTIVE = ("pending", "planned")
JOBS_PER_TURN = 8  # job list entries parsed between two turns of the event loop
_DECODER = json.JSONDecoder()


class AssignmentSync:
    def __init__(self, client: ControllerClient, cache: AssignmentCache, host: str,
                 metrics: AgentMetrics, health: Health, jobs_poll_s: float, long_poll_s: float,
                 on_change: Callable[[str], None]) -> None:
        self.client, self.cache, self.host = client, cache, host
        self.metrics, self.health = metrics, health
        self.jobs_poll_s, self.long_poll_s, self.on_change = jobs_poll_s, long_poll_s, on_change
        self.ranks: dict[str, dict[int, tuple[str, str]]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self.synced = asyncio.Event()  # set after the first successful job list
        self.on_new_job: Callable[[str], None] = lambda name: None
        self.removed = False  # a job left the cache since the owner last looked
        # the last job list read and what it said (`_apply` only reads them)
        self._last_list: bytes | None = None  # (an empty body is not a parsed list)
        self._last_parsed: tuple[dict[str, dict[int, tuple[str, str]]], dict[str, int]] = ({}, {})

    def wake(self, job: str = "") -> None:
        """Read the job list now (a shim asked about a job we do not know)."""
        if not job or job not in self._tasks:
            self._wake.set()

    async def run(self) -> None:
        try:
            while True:
                await self.refresh()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.jobs_poll_s)
                self._wake.clear()
        finally:
            for t in self._tasks.values():
                t.cancel()

    async def refresh(self) -> None:
        reply = await self.client.jobs()
        self.health.saw(reply)
        if not reply.ok or not isinstance(reply.body, bytes):
            return
        if reply.body == self._last_list:  # most reads: nothing changed, nothing to parse
            mine, versions = self._last_parsed
        else:
            mine, versions = {}, {}
            try:
                jobs = iter_jobs(reply.body)
                for i, job in enumerate(jobs):
                    if i % JOBS_PER_TURN == JOBS_PER_TURN - 1:
                        await asyncio.sleep(0)  # lookups on the same loop wait for no long parse
                    self._consider(job, mine, versions)
            except ValueError as e:
                log.error("unreadable job list from the controller: %s", e)
                return
            self._last_list, self._last_parsed = reply.body, (mine, versions)
        self._apply(mine, versions)

    def _consider(self, job: Any, mine: dict[str, dict[int, tuple[str, str]]],
                  versions: dict[str, int]) -> None:
        if not isinstance(job, dict) or not isinstance(job.get("name"), str):
            return
        ranks = _ranks(job)
        if job.get("status") in ACTIVE and any(h == self.host for h, _ in ranks.values()):
            mine[job["name"]] = ranks
            versions[job["name"]] = int(job.get("version") or 0)

    def _apply(self, mine: dict[str, dict[int, tuple[str, str]]],
                     versions: dict[str, int]) -> None:
        for name in list(self._tasks) + [n for n in self.cache.jobs if n not in self._tasks]:
            if name not in mine:
                task = self._tasks.pop(name, None)
                if task is not None:
                    task.cancel()
                self.cache.remove(name)
                self.ranks.pop(name, None)
                self.removed = True
                log.info("job %s is gone from this host", name)
        followed = set(sorted(mine)[:MAX_LONG_POLLS])
        for name, ranks in mine.items():
            self.ranks[name] = ranks
            if name in self._tasks:
                continue
            if name in followed:
                log.info("following job %s", name)
                self._tasks[name] = asyncio.create_task(self._follow(name))
                self.on_new_job(name)
            else:
                cached = self.cache.jobs.get(name)
                if cached is None or cached.version != versions[name]:
                    if cached is None:
                        self.on_new_job(name)
                    self._tasks[name] = asyncio.create_task(self._fetch_once(name))
        self._gauges()
        self.synced.set()

    async def _fetch_once(self, name: str) -> None:
        """One read of a job's assignments (jobs beyond the long-polled ones)."""
        try:
            reply = await self.client.assignments(name, self.host, None, 0)
            self.health.saw(reply)
            if reply.ok and isinstance(reply.body, dict):
                try:
                    if self.cache.update(name, self.ranks.get(name), reply.body):
                        self.on_change(name)
                except ValueError as e:
                    log.error("job %s: bad assignments from the controller: %s", name, e)
                self._gauges()
        finally:
            self._tasks.pop(name, None)

    async def _follow(self, name: str) -> None:
        version: int | None = None
        failures = 0
        while True:
            reply = await self.client.assignments(name, self.host, version,
                                                  self.long_poll_s if version is not None else 0)
            self.health.saw(reply)
            if reply.status == 404:
                self.wake()  # deleted: the next job list takes it out
                await asyncio.sleep(self.jobs_poll_s)
                continue
            if not reply.ok or not isinstance(reply.body, dict):
                await asyncio.sleep(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
                failures += 1
                continue
            failures = 0
            try:
                changed = self.cache.update(name, self.ranks.get(name), reply.body)
            except ValueError as e:
                log.error("job %s: bad assignments from the controller: %s", name, e)
                await asyncio.sleep(BACKOFF_S[-1])
                continue
            version = int(reply.body.get("version", 0))
            self._gauges()
            if changed:
                log.info("job %s: version %d, %d flows from here", name, version,
                         len(reply.body.get("assignments", [])))
                self.on_change(name)

    def _gauges(self) -> None:
        self.metrics.jobs.set(len(self.cache.jobs))
        self.metrics.flows.set(self.cache.flow_count())


def iter_jobs(data: bytes) -> Iterator[Any]:
    """The entries of the job list's ``jobs`` array (``GET /v1/jobs``), one parsed at a time,
    so the caller can give the event loop a turn between them: with a thousand jobs the whole
    document takes tens of milliseconds to parse, longer than a lookup may wait. Other keys of
    the document are read and ignored. Raises ValueError on anything that is not such a
    document."""
    text = data.decode()
    dec = _DECODER
    n = len(text)

    def skip(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    def expect(i: int, ch: str) -> int:
        i = skip(i)
        if i >= n or text[i] != ch:
            raise ValueError(f"expected {ch!r} at offset {i}")
        return i + 1

    i = expect(0, "{")
    if skip(i) < n and text[skip(i)] == "}":
        return
    while True:
        key, i = dec.raw_decode(text, skip(i))
        if not isinstance(key, str):
            raise ValueError(f"object key at offset {i} is not a string")
        i = expect(i, ":")
        if key == "jobs":
            i = expect(i, "[")
            if skip(i) < n and text[skip(i)] == "]":
                i = skip(i) + 1
            else:
                while True:
                    job, i = dec.raw_decode(text, skip(i))
                    yield job
                    i = skip(i)
                    if i < n and text[i] == ",":
                        i += 1
                        continue
                    i = expect(i, "]")
                    break
        else:
            _, i = dec.raw_decode(text, skip(i))
        i = skip(i)
        if i < n and text[i] == ",":
            i += 1
            continue
        i = expect(i, "}")
        if skip(i) != n:
            raise ValueError("trailing data after the job list")
        return


def _ranks(job: dict[str, Any]) -> dict[int, tuple[str, str]]:
    out = {}
    for r in job.get("ranks", []):
        try:
            out[int(r["rank"])] = (str(r["host"]), str(r["nic"]))
        except (KeyError, TypeError, ValueError):
            continue
    return out
