"""Telemetry to the controller: batches by size and by time, the spool while the controller is
away, replay in order when it is back, and an empty batch as a heartbeat when there is
nothing to say.

A batch holds at most `batch_records` records (`packed_batch_records` in the packed form), and
is cut shorter where it would pass what the controller takes in one batch: its peer entries,
its flow entries and its body size (`packed.fit`, with the controller's own limits).

What happens to a batch depends on the answer:

- 2xx: delivered (``records_forwarded``);
- no answer (refused, reset, timeout), 503 (a non-leader replica), 429 or another 5xx: the
  controller is away; the batch goes to the spool, and so does every later batch until the
  spool has been replayed, so the controller sees records in the order they were made;
- 422 (a batch with an invalid record is refused whole) or 413 (a body over the controller's
  cap, `C4_MAX_BODY_BYTES`, when that is set below the route's 4 MiB): the batch is split in
  halves and each half retried, in order, down to the single refused records, which are
  dropped and counted (``rejected``); the agent validates what it sends and cuts its batches
  by the controller's limits, so this only guards against drift between versions and a
  lowered cap. Nothing of a split is lost when it is interrupted: the parts not yet
  delivered go to the spool, in order, when the controller goes away in the middle, and
  back to the pending records when the forwarder is stopped (cancelled); a split of a
  spooled batch moves the spool's cursor past each part as it is delivered (`Spool.ack_part`);
- 401, 403 (a token problem an operator fixes): spooled as well, and logged;
- 415 to a packed batch (a controller that no longer takes the form): the batch is sent again
  as JSON, and batches stay JSON for `PACKED_RETRY_S`;
- any other 4xx: dropped and counted (``rejected``).

Batches go out packed (node_agent.packed) when the controller's schema lists the packed
content type, else as JSON; the spool keeps each batch as it was posted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from pydantic_core import to_json

from node_agent import packed
from node_agent.controller_client import ControllerClient, Reply
from node_agent.metrics import AgentMetrics
from node_agent.spool import Batch, Spool

log = logging.getLogger("c4.agent.forward")
AWAY = {0, 429, 500, 502, 503, 504, 401, 403}
RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0)
# Answers that refuse some of a batch, not the controller's state: the batch is split in halves
# until the refused records are alone (422: a record the rules refuse, or a batch over a limit the
# agent's cut did not foresee; 413: a body over the controller's cap, C4_MAX_BODY_BYTES, when it
# is set below the route's own limit), and only those are dropped, counted as rejected.
SPLIT = {413, 422}
PACKED_RETRY_S = 600.0  # after a 415 to a packed batch, JSON for this long


# What parsing a spooled body that is not what it says raises (a disk error, a hand-edited or
# foreign spool file): the batch is dropped and counted, the replay goes on.
UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, struct.error)


class Unreadable(Exception):
    """A spooled body did not parse (`UNREADABLE`, raised by the parsing itself, not by
    anything else the replay does)."""


class Health:
    """What /healthz reports; updated by every controller call."""

    def __init__(self) -> None:
        self.controller_up = False
        self.last_ok_us = 0
        self.last_error = ""

    def saw(self, reply: Reply) -> None:
        if reply.reachable and reply.status not in (401, 403):
            self.controller_up = True
            self.last_ok_us = time.time_ns() // 1000
        else:
            self.controller_up = False
            self.last_error = reply.error or f"HTTP {reply.status}"


class Forwarder:
    def __init__(self, client: ControllerClient, spool: Spool, metrics: AgentMetrics,
                 health: Health, host: str, batch_records: int, interval_s: float,
                 heartbeat_s: float, heartbeat_ok: Callable[[], bool],
                 packed_ok: Callable[[], bool] = lambda: False,
                 truncated_ok: Callable[[], bool] = lambda: False,
                 packed_batch_records: int | None = None) -> None:
        self.client, self.spool, self.metrics, self.health = client, spool, metrics, health
        self.host, self.batch_records, self.interval_s = host, batch_records, interval_s
        self.heartbeat_s, self.heartbeat_ok = heartbeat_s, heartbeat_ok
        self.packed_ok, self.truncated_ok = packed_ok, truncated_ok
        # Packed batches may be larger: each POST costs the agent CPU of its own (httpx, the
        # stand-in controller's answer; bench/agent), and a packed record is 454 bytes at most.
        self.packed_batch_records = packed_batch_records or batch_records
        self.limit = batch_records  # records per POST now (`_set_limit`, from the form in use)
        self._packed_refused = float("-inf")
        self.pending: list[packed.Pending] = []  # records: JSON text or packed entries
        self._host = to_json(host)
        self._wake = asyncio.Event()
        self._last_post = time.monotonic()
        self._spool_lock = asyncio.Lock()
        self._failed_at = float("-inf")
        self._spooling: set[asyncio.Future[None]] = set()  # spool writes under way
        self._running: asyncio.Task[Any] | None = None  # the task in `run`

    def add(self, records: list[packed.Pending]) -> None:
        """Queue records, each the JSON text of one API record or a packed entry."""
        self.pending.extend(records)
        if len(self.pending) >= self.limit:
            self._wake.set()

    def add_dicts(self, records: list[dict[str, Any]]) -> None:
        """Queue records given as dicts (the Mapper's general path): packed entries when
        batches go out packed, else JSON text (`truncated` only where the controller's JSON
        form has it; the packed form always carries it)."""
        if self.packing():
            self.add([packed.entry(r) for r in records])
        elif self.truncated_ok():
            self.add([to_json(r) for r in records])
        else:
            self.add([to_json({k: v for k, v in r.items() if k != "truncated"}) for r in records])

    def packing(self) -> bool:
        return self.packed_ok() and time.monotonic() - self._packed_refused >= PACKED_RETRY_S

    def _body(self, records: list[packed.Pending]) -> bytes:
        """The batch's body. In JSON, packed entries the controller's rules refuse (a counter out
        of range: one would otherwise raise here and stop the forwarder) are taken out of
        `records` itself and counted as rejected, as the controller would have."""
        if records and self.packing():
            return packed.body(self.host, records)
        ok = self.truncated_ok()
        if any(not isinstance(r, bytes) for r in records):
            kept = [r for r in records if isinstance(r, bytes) or packed.convertible(r, ok)]
            if len(kept) < len(records):
                log.warning("dropped %d records the controller would refuse (counters out of range)",
                            len(records) - len(kept))
                self.metrics.records_dropped.labels("rejected").inc(len(records) - len(kept))
                records[:] = kept
        return packed.json_body(self._host, records, ok)

    async def run(self) -> None:
        """Flush on size or interval, replay the spool, send heartbeats; until cancelled."""
        self._running = asyncio.current_task()
        replay = asyncio.create_task(self._replay_loop())
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval_s)
                self._wake.clear()
                await self.flush()
        finally:
            replay.cancel()

    def _set_limit(self) -> int:
        self.limit = self.packed_batch_records if self.packing() else self.batch_records
        return self.limit

    def _take(self) -> list[packed.Pending]:
        """The next batch off the pending records: `limit` of them at most, fewer where more
        would pass the controller's per-batch limits (`packed.fit`)."""
        n = packed.fit(self.pending, self._set_limit(), self.packing())
        batch = self.pending[:n]
        del self.pending[:n]
        return batch

    async def flush(self, everything: bool = False) -> None:
        while self.pending:
            await self._send(self._take())
            if not everything and len(self.pending) < self._set_limit():
                break
        if (not self.pending and self.heartbeat_s and self.heartbeat_ok() and
                time.monotonic() - self._last_post >= self.heartbeat_s and self.spool.empty()):
            reply = await self.client.post_collectives(self._body([]))
            self.health.saw(reply)
            self._last_post = time.monotonic()

    async def _post(self, records: list[packed.Pending]) -> tuple[Reply, bytes]:
        """POST a batch of these records; after a 415 to it packed, again as JSON. Counts the
        answers and tells `health`."""
        body = self._body(records)
        reply = await self.client.post_collectives(body)
        self._saw(reply)
        if reply.status == 415 and packed.is_packed(body):
            self._refused_packed()
            body = self._body(records)
            reply = await self.client.post_collectives(body)
            self._saw(reply)
        return reply, body

    def _refused_packed(self) -> None:
        log.warning("the controller refused a packed batch (415): sending JSON for %.0f s", PACKED_RETRY_S)
        self._packed_refused = time.monotonic()

    def _saw(self, reply: Reply) -> None:
        self._last_post = time.monotonic()
        self.health.saw(reply)
        self.metrics.posts.labels(str(reply.status)).inc()

    def _refused(self, reply: Reply, records: list[packed.Pending]) -> None:
        if len(records) == 1:
            log.warning("controller refused a record: HTTP %s %s: %s", reply.status, reply.error[:200],
                        records[0][:300])
        else:
            log.warning("controller refused %d records: HTTP %s %s", len(records), reply.status,
                        reply.error[:200])
        self.metrics.records_dropped.labels("rejected").inc(len(records))

    async def _send(self, records: list[packed.Pending]) -> None:
        """Deliver a batch, or spool it; a batch refused with 413 or 422 is split in halves,
        each delivered (or split) in turn. `parts` holds, in order, what is not delivered,
        spooled or dropped yet: if the forwarder is stopped (cancelled) in the middle, those
        records go back to the head of `pending`; once the controller is away, the rest of
        the parts go to the spool, behind the part that met it."""
        parts = [records]
        try:
            while parts:
                part = parts[0]
                # Order: while anything waits in the spool, new batches queue behind it. And while
                # the controller was away a moment ago, the replay loop probes it, not every batch.
                if not self.spool.empty() or time.monotonic() - self._failed_at < 1.0:
                    del parts[0]  # (spooled even if stopped now: `_to_spool` finishes the write)
                    await self._to_spool(self._body(part), len(part))
                    continue
                reply, body = await self._post(part)
                del parts[0]
                if reply.ok:
                    self.metrics.records_forwarded.inc(len(part))
                elif reply.status in AWAY:
                    self._failed_at = time.monotonic()
                    if reply.status in (401, 403):
                        log.error("controller refused the token (HTTP %s); spooling", reply.status)
                    await self._to_spool(body, len(part))
                elif reply.status in SPLIT and len(part) > 1:
                    half = len(part) // 2
                    parts[:0] = (part[:half], part[half:])
                else:  # (413 to one record: over the body cap alone, refused for good)
                    self._refused(reply, part)
        except asyncio.CancelledError:
            self.pending[:0] = [r for p in parts for r in p]  # stopped: still ours to keep
            raise

    async def _to_spool(self, body: bytes, n: int) -> None:
        """Append a batch to the spool; it runs to its end even if the caller is cancelled
        meanwhile (`_shielded`)."""
        await self._shielded(self._append(body, n))

    async def _append(self, body: bytes, n: int) -> None:
        if await self._locked(self.spool.append, body, n):
            self.metrics.records_spooled.inc(n)
        else:
            self.metrics.records_dropped.labels("spool_full").inc(n)
            log.warning("spool full (%d bytes): dropped %d records", self.spool.max_bytes, n)
        self._gauges()

    def _gauges(self) -> None:
        self.metrics.spool_bytes.set(self.spool.size_bytes)
        self.metrics.spool_records.set(self.spool.pending_records)

    async def _replay_loop(self) -> None:
        """Deliver the spool oldest first whenever the controller answers."""
        attempt = 0
        while True:
            if self.spool.empty():
                attempt = 0
                await asyncio.sleep(0.2)
                continue
            batch = await asyncio.to_thread(self.spool.peek)
            if batch is None:
                await asyncio.sleep(0.2)
                continue
            try:
                delivered = await self._replay(batch)
            except Unreadable as e:  # a spooled body this agent cannot read: not replayable
                log.error("dropped a spooled batch of %d records that does not parse: %r", batch.records, e)
                self.metrics.records_dropped.labels("unreadable").inc(batch.records)
                await self._spool_call(self.spool.ack, batch)
                delivered = True
            except Exception:  # anything else: the batch stays spooled, tried again after the backoff
                log.exception("replaying a spooled batch of %d records failed", batch.records)
                delivered = False
            if delivered:
                attempt = 0
            else:
                await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
                attempt += 1
            self._gauges()

    async def _replay(self, batch: Batch) -> bool:
        """Deliver the spool's oldest batch (or what of it is not delivered yet) and move past
        it; False if the controller is away. A batch refused with 413 or 422 is split as live
        ones are, and the spool's cursor moves past each part once it is delivered (or refused
        for good): if the agent stops, or the controller goes away, in the middle, the parts
        not delivered stay at the head of the spool, in order."""
        if batch.skip:  # part of it was delivered before: the rest, in the form in use now
            records = self._parsed(self._records, batch.body)[batch.skip:]
            return await self._replay_parts(batch, [list(enumerate(records))])
        body, bad = batch.body, 0
        reply = await self.client.post_collectives(body)
        self._saw(reply)
        if reply.status == 415 and packed.is_packed(body):  # spooled for a controller that took it
            self._refused_packed()
            dropped: list[None] = []  # records the controller's rules refuse: no JSON for them
            body = self._parsed(packed.to_json_body, body, self._host, self.truncated_ok(),
                                partial(dropped.append, None))
            bad = len(dropped)
            reply = await self.client.post_collectives(body)
            self._saw(reply)
        if reply.status in AWAY:
            return False
        if reply.status in SPLIT and batch.records > 1:
            indexed = list(enumerate(self._parsed(self._records, batch.body)))
            half = len(indexed) // 2
            return await self._replay_parts(batch, [indexed[:half], indexed[half:]])
        if reply.ok:
            self.metrics.records_forwarded.inc(batch.records - bad)
            self.metrics.records_dropped.labels("rejected").inc(bad)
        else:
            log.warning("controller refused %d spooled records: HTTP %s %s", batch.records, reply.status,
                        reply.error[:200])
            self.metrics.records_dropped.labels("rejected").inc(batch.records)
        await self._spool_call(self.spool.ack, batch)
        return True

    async def _replay_parts(self, batch: Batch, parts: list[list[tuple[int, packed.Pending]]]) -> bool:
        """Deliver a spooled batch's records in `parts`, in order, each a list of (position among
        the batch's records, record), splitting a part refused with 413 or 422. Once a part is
        delivered (or refused for good), every record before the next part's first one is
        done, and the spool's cursor moves there: positions are carried, not computed, as a
        part posted as JSON may lose records with no JSON form (`_body`). False if the
        controller is away (the rest stays spooled)."""
        while parts:
            sent = [r for _, r in parts[0]]
            reply, _ = await self._post(sent)  # (as JSON, records with no JSON form leave `sent`)
            if reply.status in AWAY:
                return False
            kept = {id(r) for r in sent}
            part = [(i, r) for i, r in parts.pop(0) if id(r) in kept]
            if reply.ok:
                self.metrics.records_forwarded.inc(len(part))
            elif reply.status in SPLIT and len(part) > 1:
                half = len(part) // 2
                parts[:0] = (part[:half], part[half:])
                continue
            else:
                self._refused(reply, [r for _, r in part])
            if parts and parts[0]:  # (after the last part: `ack` below)
                await self._spool_call(self.spool.ack_part, batch, parts[0][0][0])
        await self._spool_call(self.spool.ack, batch)
        return True

    @staticmethod
    def _parsed(parse: Callable[..., Any], *args: Any) -> Any:
        """`parse(*args)` on a spooled body; what a body that does not parse raises, as `Unreadable`."""
        try:
            return parse(*args)
        except UNREADABLE as e:
            raise Unreadable(repr(e)) from e

    @staticmethod
    def _records(body: bytes) -> list[packed.Pending]:
        """A spooled batch's records, in order, in the form they were spooled in."""
        if packed.is_packed(body):
            return list(packed.entries(body))
        return [to_json(r) for r in json.loads(body).get("records", [])]

    async def _spool_call(self, fn: Callable[..., Any], *args: Any) -> None:
        """`fn(*args)` on the spool (`_locked`), run to its end even if the caller is cancelled."""
        await self._shielded(self._locked(fn, *args))

    async def _locked(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the spool in a worker thread, one at a time."""
        async with self._spool_lock:
            return await asyncio.to_thread(fn, *args)

    async def _shielded(self, work: Coroutine[Any, Any, None]) -> None:
        """Await `work` as a task of its own that a cancellation of the caller does not stop:
        a spool write or cursor move, once begun, happens (`drain` waits for those under way)."""
        task = asyncio.ensure_future(work)
        self._spooling.add(task)
        task.add_done_callback(self._spooling.discard)
        await asyncio.shield(task)

    async def drain(self, timeout_s: float) -> None:
        """At shutdown: post or spool what is pending (after the spool writes under way). A
        `run` cancelled just before puts the unsent parts of a split it was in back at the
        head of `pending` only as its cancellation unwinds (an HTTP client closing its
        connection takes turns of the loop): wait for that first (up to `timeout_s` more),
        else those parts would miss the drain, or go out behind records that came after them."""
        running = self._running
        if running is not None and running is not asyncio.current_task() and not running.done():
            await asyncio.wait([running], timeout=timeout_s)
        try:
            await asyncio.wait_for(self.flush(everything=True), timeout_s)
        except TimeoutError:
            while self.pending:
                part = self._take()
                await self._to_spool(self._body(part), len(part))
        while self._spooling:
            for failed in await asyncio.gather(*self._spooling, return_exceptions=True):
                if failed is not None:
                    log.error("spool write failed at shutdown: %r", failed)
