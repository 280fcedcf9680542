"""The agent's end of the shim socket (nccl_shim/FORMAT.md): LOOKUPs answered from the cache,
live connections remembered so new weights can be pushed to them, telemetry handed on.

One non-blocking Unix datagram socket, read on the event loop a datagram per wake-up. A LOOKUP is answered
inside the same callback from the in-memory cache (`node_agent.cache`), so its latency is a
decode, a few dict reads and an encode; nothing on this path waits for the network.
Refreshes (``req_id`` 0, every second per live send connection) keep a table of live
connections; when a job's version changes, `push_job` sends each of its live connections its
new answer (``req_id`` 0) at once, so new weights reach NCCL without waiting for a refresh.
Telemetry datagrams go to the `Mapper`, and mapped records (their JSON text, or packed
entries when the controller takes the packed form) to the forwarder; the common COLL record
takes the fast path (node_agent.coll_fast).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic_core import to_json

from node_agent import coll_fast
from node_agent.cache import AssignmentCache
from node_agent.metrics import AgentMetrics
from node_agent.shim_protocol import (
    MAX_BATCH,
    T_BATCH,
    T_COLL,
    Assign,
    Coll,
    Conn,
    Lookup,
    Malformed,
    Stats,
    batch_parts,
    decode,
    encode,
)
from node_agent.telemetry import Mapper

log = logging.getLogger("c4.agent.shim")
LIVE_TTL_S = 5.0  # a connection that stopped refreshing (every 1 s) is forgotten after this
STATS_TTL_S = 60.0
SHIM_COUNTERS = ("ring_drops", "send_drops", "lookups", "lookup_timeouts", "lookup_failures",
                 "bind_fallbacks", "records_sent", "handoffs", "route_fallbacks")


@dataclass(slots=True)
class LiveConn:
    look: Lookup
    addr: Any
    job: str
    seen: float
    sent: Assign | None


def bind_socket(path: str, mode: int) -> socket.socket:
    """The agent's datagram socket at `path` (a stale socket file from a dead agent is
    replaced; any other file there is an error)."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind(path)
    os.chmod(path, mode)  # the shim may run as another user than the agent
    sock.setblocking(False)
    return sock


class ShimServer:
    def __init__(self, sock: socket.socket, cache: AssignmentCache, mapper: Mapper,
                 metrics: AgentMetrics, emit: Callable[[list[Any]], None]) -> None:
        self.sock, self.cache, self.mapper, self.metrics, self.emit = sock, cache, mapper, metrics, emit
        self.live: dict[tuple[Any, ...], LiveConn] = {}
        self.stats: dict[int, tuple[Stats, float]] = {}
        self.on_unknown_job: Callable[[str], None] = lambda job: None
        # records as packed entries (node_agent.packed) rather than JSON text: the forwarder's say
        self.packing: Callable[[], bool] = lambda: self.mapper.caps.packed
        # general-path records (dicts): the forwarder's `add_dicts` in the daemon
        self.emit_dicts: Callable[[list[dict[str, Any]]], None] = (
            lambda records: self.emit([to_json(r) for r in records]))
        self._loop: asyncio.AbstractEventLoop | None = None
        # plain counts on the hot path; `sync_metrics` copies them into Prometheus
        self.counts = {"lookup": 0, "coll": 0, "conn": 0, "stats": 0, "batch": 0, "malformed": 0}
        self._synced = dict(self.counts)
        self._outcomes = {o: metrics.lookups.labels(o) for o in ("hit", "miss", "unknown_job")}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.sock.fileno(), self._readable)

    def stop(self, path: str | None = None) -> None:
        """Close the socket without losing what shims already sent: unlink `path` first (a
        shim's next send then fails and the record stays in its ring until an agent is
        back), then read what is queued, then close."""
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._readable(limit=1 << 30)
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
        self.sock.close()

    # ---- receive ----
    def _readable(self, limit: int = 1) -> None:
        """Read `limit` datagrams at most (the loop calls this again while the socket is
        readable: its poll is level-triggered). One per call: a wake-up usually finds one, and
        a second read would only fail with EAGAIN, an exception and a system call per wake-up
        (with 8 shims sending every 10 ms, most of the agent's cost per datagram)."""
        recv, now = self.sock.recvfrom, time.time()
        for _ in range(limit):
            try:
                data, addr = recv(MAX_BATCH)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("shim socket: %s", e)
                return
            self.handle(data, addr, now)

    def handle(self, data: bytes, addr: Any, now: float) -> None:
        counts = self.counts
        kind = data[3] if len(data) > 3 else 0
        if kind == T_COLL:
            m = self.mapper
            fast = m.coll_entry(data) if self.packing() else m.coll_json(data)
            if fast is not None:
                counts["coll"] += 1
                self.emit([fast])
                return
        elif kind == T_BATCH:
            self._batch(data, addr, now)
            return
        self._general(data, addr, now)

    def _batch(self, data: bytes, addr: Any, now: float) -> None:
        """A BATCH: its easy COLL records in one hand-over to the forwarder (read in place,
        node_agent.coll_fast), the rest one by one in order."""
        parts = batch_parts(data)
        if parts is None:
            self.counts["malformed"] += 1
            log.debug("malformed batch datagram")
            return
        self.counts["batch"] += 1
        out = coll_fast.batch(self.mapper, data, parts,
                              lambda part: self._general(part, addr, now), self.packing())
        if out:
            self.counts["coll"] += len(out)
            self.emit(out)

    def _general(self, data: bytes, addr: Any, now: float) -> None:
        counts = self.counts
        msg = decode(data)
        now_us = int(now * 1e6)
        if isinstance(msg, Coll):
            counts["coll"] += 1
            records = self.mapper.on_coll(msg, now_us)
            if records:
                self.emit_dicts(records)
        elif isinstance(msg, Lookup):
            counts["lookup"] += 1
            self._lookup(msg, addr, now)
        elif isinstance(msg, Conn):
            counts["conn"] += 1
            self.mapper.on_conn(msg, now_us)
        elif isinstance(msg, Stats):
            counts["stats"] += 1
            self.mapper.on_stats(msg, now_us)
            self.stats[msg.pid] = (msg, now)
        else:  # Malformed; or an ASSIGN or HANDOFF sent to us: shims never send those
            counts["malformed"] += 1
            if isinstance(msg, Malformed):
                log.debug("malformed datagram (%s)", msg.reason)

    def sync_metrics(self) -> None:
        for name, n in self.counts.items():
            delta = n - self._synced[name]
            if delta:
                if name == "malformed":
                    self.metrics.malformed.inc(delta)
                else:
                    self.metrics.datagrams.labels(name).inc(delta)
                self._synced[name] = n

    # ---- lookups ----
    def _lookup(self, look: Lookup, addr: Any, now: float) -> None:
        t0 = time.perf_counter()
        ident = self.mapper.process_of(look.pid)
        self.mapper.on_lookup(look, int(now * 1e6))
        answer, outcome = self.cache.answer(look, ident.job, ident.job_rank)
        key = (addr, look.comm_id, look.local, look.remote, look.conn_index, look.dst_rank,
               look.kind)
        live = self.live.get(key)
        pushed = replace(answer, req_id=0)  # what a push of this answer looks like
        sent = live.sent if live is not None else None
        if look.req_id:
            self._send(encode(answer), addr)
            self._outcomes[outcome].inc()
            self.metrics.lookup_seconds.observe(time.perf_counter() - t0)
            sent = pushed
            if outcome == "unknown_job" and (look.job or ident.job):
                self.on_unknown_job(look.job or ident.job)
        elif (outcome == "hit" and answer.version != look.version and sent != pushed and
              self._send(encode(pushed), addr)):
            sent = pushed  # a refresh from a connection on an older version than the cache's
        if look.kind == "tcp" and addr and outcome == "hit":
            job = self.cache.job_for(look.job or ident.job, look.src_rank)
            self.live[key] = LiveConn(look, addr, job.name if job else "", now, sent)

    def push_job(self, job: str, now: float | None = None) -> int:
        """Send every live connection of `job` its current answer where it changed."""
        now = time.time() if now is None else now
        sent = 0
        for key, live in list(self.live.items()):
            if now - live.seen > LIVE_TTL_S:
                del self.live[key]
                continue
            if live.job != job:
                continue
            ident = self.mapper.process_of(live.look.pid)
            answer, outcome = self.cache.answer(live.look, ident.job, ident.job_rank)
            answer = replace(answer, req_id=0)
            if outcome != "hit" or answer == live.sent:
                log.debug("job %s: not pushing to %s (%s, version %s sent, %d now)", job,
                          live.addr, outcome, live.sent and live.sent.version, answer.version)
                continue
            if self._send(encode(answer), live.addr):
                live.sent = answer
                sent += 1
        if sent:
            self.metrics.pushes.inc(sent)
            log.info("job %s: pushed its new assignment to %d live connections", job, sent)
        return sent

    def _send(self, data: bytes, addr: Any) -> bool:
        if not addr:
            return False  # an unbound shim socket cannot be answered
        try:
            self.sock.sendto(data, addr)
            return True
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.ENOENT):
                for key in [k for k, v in self.live.items() if v.addr == addr]:
                    del self.live[key]  # the process is gone
            return False

    # ---- the shims' own counters ----
    def shim_counters(self, now: float) -> dict[str, int]:
        for pid, (_, seen) in list(self.stats.items()):
            if now - seen > STATS_TTL_S:
                del self.stats[pid]
        return {name: sum(getattr(s, name) for s, _ in self.stats.values())
                for name in SHIM_COUNTERS}
