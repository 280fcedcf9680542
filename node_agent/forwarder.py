"""Telemetry to the controller: batches by size and by time, the spool while the controller is
away, replay in order when it is back, and an empty batch as a heartbeat when there is
nothing to say.

What happens to a batch depends on the answer:

- 2xx: delivered (``records_forwarded``);
- no answer (refused, reset, timeout), 503 (a non-leader replica), 429 or another 5xx: the
  controller is away; the batch goes to the spool, and so does every later batch until the
  spool has been replayed, so the controller sees records in the order they were made;
- 422 (a batch with an invalid record is refused whole): the batch is split in halves and
  each half retried, down to the single bad records, which are dropped and counted
  (``rejected``); the agent validates what it sends, so this only guards against drift
  between versions;
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
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from pydantic_core import to_json

from node_agent import packed
from node_agent.controller_client import ControllerClient, Reply
from node_agent.metrics import AgentMetrics
from node_agent.spool import Spool

log = logging.getLogger("c4.agent.forward")
AWAY = {0, 429, 500, 502, 503, 504, 401, 403}
RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0)
# Answers that refuse some of a batch, not the controller's state: the batch is split in halves
# until the refused records are alone (422: a record the rules refuse; 413: a body over the
# controller's cap, C4_MAX_BODY_BYTES, which a packed batch of `packed_batch_records` with many
# distinct shapes can pass), and only those are dropped, counted as rejected.
SPLIT = {413, 422}
PACKED_RETRY_S = 600.0  # after a 415 to a packed batch, JSON for this long


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

    async def flush(self, everything: bool = False) -> None:
        while self.pending:
            limit = self._set_limit()
            batch = self.pending[:limit]
            del self.pending[:limit]
            await self._send(batch)
            if not everything and len(self.pending) < self._set_limit():
                break
        if (not self.pending and self.heartbeat_s and self.heartbeat_ok() and
                time.monotonic() - self._last_post >= self.heartbeat_s and self.spool.empty()):
            reply = await self.client.post_collectives(self._body([]))
            self.health.saw(reply)
            self._last_post = time.monotonic()

    async def _send(self, records: list[packed.Pending]) -> None:
        body = self._body(records)
        # Order: while anything waits in the spool, new batches queue behind it. And while the
        # controller was away a moment ago, the replay loop probes it, not every batch.
        if not self.spool.empty() or time.monotonic() - self._failed_at < 1.0:
            await self._to_spool(body, len(records))
            return
        try:
            reply = await self.client.post_collectives(body)
        except asyncio.CancelledError:
            self.pending[:0] = records  # stopped mid-POST: the batch is still ours to keep
            raise
        self._last_post = time.monotonic()
        await self._outcome(reply, records, body)

    async def _outcome(self, reply: Reply, records: list[packed.Pending], body: bytes) -> None:
        self.health.saw(reply)
        self.metrics.posts.labels(str(reply.status)).inc()
        if reply.status == 415 and packed.is_packed(body):
            self._refused_packed()
            body = self._body(records)
            try:
                reply = await self.client.post_collectives(body)
            except asyncio.CancelledError:
                self.pending[:0] = records  # stopped mid-POST: the batch is still ours to keep
                raise
            await self._outcome(reply, records, body)
        elif reply.ok:
            self.metrics.records_forwarded.inc(len(records))
        elif reply.status in AWAY:
            self._failed_at = time.monotonic()
            if reply.status in (401, 403):
                log.error("controller refused the token (HTTP %s); spooling", reply.status)
            await self._to_spool(body, len(records))
        elif reply.status in SPLIT:
            await self._bisect(records)
        else:
            log.warning("controller refused %d records: HTTP %s %s", len(records), reply.status,
                        reply.error[:200])
            self.metrics.records_dropped.labels("rejected").inc(len(records))

    def _refused_packed(self) -> None:
        log.warning("the controller refused a packed batch (415): sending JSON for %.0f s", PACKED_RETRY_S)
        self._packed_refused = time.monotonic()

    async def _bisect(self, records: list[packed.Pending]) -> None:
        if len(records) == 1:  # (413 too: one record over the body cap is refused for good)
            log.warning("controller refused a record: %s", records[0][:300])
            self.metrics.records_dropped.labels("rejected").inc()
            return
        half = len(records) // 2
        for part in (records[:half], records[half:]):
            body = self._body(part)
            reply = await self.client.post_collectives(body)
            await self._outcome(reply, part, body)

    async def _to_spool(self, body: bytes, n: int) -> None:
        async with self._spool_lock:
            ok = await asyncio.to_thread(self.spool.append, body, n)
        if ok:
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
            body, dropped = batch.body, 0
            reply = await self.client.post_collectives(body)
            if reply.status == 415 and packed.is_packed(body):  # spooled for a controller that took it
                self._refused_packed()
                bad: list[None] = []
                body = packed.to_json_body(body, self._host, self.truncated_ok(), partial(bad.append, None))
                dropped = len(bad)  # (records the controller's rules refuse: no JSON for them)
                self.metrics.records_dropped.labels("rejected").inc(dropped)
                reply = await self.client.post_collectives(body)
            self.health.saw(reply)
            self.metrics.posts.labels(str(reply.status)).inc()
            if reply.ok or (reply.status not in AWAY and reply.status not in SPLIT):
                if reply.ok:
                    self.metrics.records_forwarded.inc(batch.records - dropped)
                else:
                    self.metrics.records_dropped.labels("rejected").inc(batch.records - dropped)
                async with self._spool_lock:
                    await asyncio.to_thread(self.spool.ack, batch)
                attempt = 0
            elif reply.status in SPLIT:
                records: list[packed.Pending] = (
                    list(packed.entries(body)) if packed.is_packed(body) else
                    [to_json(r) for r in json.loads(body).get("records", [])])
                async with self._spool_lock:
                    await asyncio.to_thread(self.spool.ack, batch)
                await self._bisect(records)
            else:
                await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
                attempt += 1
            self._gauges()

    async def drain(self, timeout_s: float) -> None:
        """At shutdown: post or spool what is pending."""
        try:
            await asyncio.wait_for(self.flush(everything=True), timeout_s)
        except TimeoutError:
            limit = self._set_limit()
            for i in range(0, len(self.pending), limit):
                part = self.pending[i: i + limit]
                await asyncio.to_thread(self.spool.append, self._body(part), len(part))
            self.pending.clear()
