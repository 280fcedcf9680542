"""The node agent daemon: one asyncio event loop that wires the parts together.

    shim socket ──LOOKUP──► cache ──ASSIGN──► shim          (node_agent.shim_server, .cache)
    shim socket ──COLL/CONN/STATS──► mapper ──► forwarder ──► controller, or spool
    controller ──jobs, assignments (long-poll)──► cache ──► pushes to live connections
    controller ──probe requests──► prober ──► controller     (in a worker thread)
    fixed data port ──hello──► hand-off to the NCCL process  (node_agent.handoff)
    /healthz /readyz /metrics                                (node_agent.web)

Start-up in steps: bind the shim socket and the data port first (so NCCL never waits on the
controller), then follow the controller, retrying forever with back-off; shutting down posts
or spools what is pending. Nothing here blocks the loop: file and probe I/O run in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import uvicorn

from node_agent.cache import AssignmentCache
from node_agent.config import AgentSettings, listen_address
from node_agent.controller_client import ControllerClient
from node_agent.forwarder import Forwarder, Health
from node_agent.handoff import HandoffAcceptor, listen_socket
from node_agent.metrics import AgentMetrics
from node_agent.probing import probe_and_report
from node_agent.shim_server import ShimServer, bind_socket
from node_agent.spool import Spool
from node_agent.sync import AssignmentSync
from node_agent.telemetry import Capabilities, Mapper, capabilities
from node_agent.web import app

log = logging.getLogger("c4.agent")
HOUSEKEEPING_S = 0.2
CAPABILITIES_S = 60.0


class Agent:
    def __init__(self, settings: AgentSettings) -> None:
        self.s = settings
        self.metrics = AgentMetrics()
        self.health = Health()
        self.cache = AssignmentCache(settings.host)
        self.mapper = Mapper(self.cache.job_for, int(settings.unmapped_grace_s * 1e6))
        self.client = ControllerClient(settings.controller_url, settings.token,
                                       settings.http_timeout_s)
        self.spool = Spool(settings.spool, settings.spool_max_bytes)
        self.forwarder = Forwarder(self.client, self.spool, self.metrics, self.health,
                                   settings.host, settings.batch_records, settings.batch_interval_s,
                                   settings.heartbeat_s, lambda: self.mapper.caps.heartbeat,
                                   lambda: self.mapper.caps.packed,
                                   lambda: self.mapper.caps.truncated,
                                   packed_batch_records=settings.packed_batch_records)
        self.shim = ShimServer(bind_socket(settings.socket, settings.socket_mode), self.cache,
                               self.mapper, self.metrics, self.forwarder.add)
        self.sync = AssignmentSync(self.client, self.cache, settings.host, self.metrics,
                                   self.health, settings.jobs_poll_s, settings.long_poll_s,
                                   self._changed)
        self.shim.on_unknown_job = self.sync.wake
        self.shim.packing = self.forwarder.packing
        self.shim.emit_dicts = self.forwarder.add_dicts
        self._probe_now = asyncio.Event()
        self.sync.on_new_job = lambda job: self._probe_now.set()  # its pairs may want probes
        self.acceptor = (HandoffAcceptor(listen_socket(settings.shim_port), self.shim.sock,
                                         self.metrics) if settings.shim_port else None)
        self.jobs_file = os.path.join(settings.spool, "jobs.json")
        self._load_jobs()
        self.probe_runs = 0
        self.started = time.time()
        self._collected = time.monotonic()
        self._seen_dropped: dict[str, int] = {}
        self._seen_peers = self._seen_conflicts = 0

    def _changed(self, job: str) -> None:
        self.shim.push_job(job)
        self._jobs_dirty = True

    def _load_jobs(self) -> None:
        """The last known plans, from before a restart: lookups and the rank mapping work at
        once, even while the controller is away (the controller's answer replaces them)."""
        self._jobs_dirty = False
        try:
            with open(self.jobs_file, encoding="utf-8") as f:
                n = self.cache.restore(json.load(f))
        except (OSError, ValueError):
            return
        if n:
            log.info("restored %d jobs' assignments from %s", n, self.jobs_file)

    def _save_jobs(self) -> None:
        tmp = self.jobs_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.cache.snapshot(), f)
        os.replace(tmp, self.jobs_file)

    # ---- state for /healthz ----
    def state(self) -> dict[str, Any]:
        now = time.time()
        shim = self.shim.shim_counters(now)
        return {
            "status": "ok" if self.health.controller_up else "degraded",
            "ready": self.sync.synced.is_set() and self.health.controller_up,
            "host": self.s.host,
            "uptime_s": round(now - self.started, 1),
            "controller": {"url": self.s.controller_url, "reachable": self.health.controller_up,
                           "last_ok_us": self.health.last_ok_us or None,
                           "last_error": self.health.last_error or None},
            "jobs": sorted(self.cache.jobs), "flows": self.cache.flow_count(),
            "shim_processes": len(self.shim.stats), "live_connections": len(self.shim.live),
            "spool": {"records": self.spool.pending_records, "bytes": self.spool.size_bytes,
                      "max_bytes": self.spool.max_bytes,
                      "dropped_records": self.spool.dropped_records},
            "records": {"pending": len(self.forwarder.pending),
                        "held_for_ranks": len(self.mapper.held),
                        "dropped": dict(self.mapper.counts.dropped)},
            "shim_counters": shim,
            "capabilities": asdict(self.mapper.caps),
            "probe_runs": self.probe_runs,
            "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
        }

    def refresh_metrics(self) -> None:
        self.shim.sync_metrics()
        m, c = self.metrics, self.mapper.counts
        m.controller_up.set(1 if self.health.controller_up else 0)
        m.spool_bytes.set(self.spool.size_bytes)
        m.spool_records.set(self.spool.pending_records)
        m.processes.set(len(self.shim.stats))
        for name, v in self.shim.shim_counters(time.time()).items():
            m.shim.labels(name).set(v)
        for reason, n in c.dropped.items():
            seen = self._seen_dropped.get(reason, 0)
            if n > seen:
                m.records_dropped.labels(reason).inc(n - seen)
                self._seen_dropped[reason] = n
                log.warning("dropped %d records that could not be mapped (%s); %d in all",
                            n - seen, reason, n)
        if c.peers_dropped > self._seen_peers:
            m.peers_dropped.inc(c.peers_dropped - self._seen_peers)
            self._seen_peers = c.peers_dropped
        if c.conflicts > self._seen_conflicts:
            m.rank_conflicts.inc(c.conflicts - self._seen_conflicts)
            self._seen_conflicts = c.conflicts
        m.records_dropped.labels("spool_full")  # shown (at 0) before the first such drop

    # ---- loops ----
    async def _housekeeping(self) -> None:
        n = 0
        while True:
            await asyncio.sleep(HOUSEKEEPING_S)
            now_us = time.time_ns() // 1000
            released = self.mapper.release(now_us, patient=not self.health.controller_up)
            if released:
                self.forwarder.add_dicts(released)
            n += 1
            if n % 50 == 0:
                self.mapper.expire(now_us)
            if self._jobs_dirty or (n % 25 == 0 and self.sync.removed):
                self._jobs_dirty = self.sync.removed = False
                await asyncio.to_thread(self._save_jobs)
                # The cache is long-lived: keep the collector from walking its objects again
                # (a full collection over a thousand jobs' flows takes tens of milliseconds,
                # during which lookups would wait). Once an hour, collect everything, so
                # cyclic garbage frozen meanwhile is not kept for ever.
                if time.monotonic() - self._collected > 3600:
                    gc.unfreeze()
                    gc.collect()
                    self._collected = time.monotonic()
                gc.freeze()
            self.refresh_metrics()

    async def _capabilities(self) -> None:
        while True:
            reply = await self.client.openapi()
            if reply.ok and isinstance(reply.body, dict):
                caps = capabilities(reply.body)
                if caps != self.mapper.caps:
                    log.info("controller accepts: %s", caps)
                self.mapper.caps = caps
                await asyncio.sleep(CAPABILITIES_S)
            else:
                await asyncio.sleep(2.0)

    async def _probes(self) -> None:
        while True:
            self._probe_now.clear()
            reply = await self.client.probe_requests(self.s.host)
            if reply.ok and isinstance(reply.body, dict):
                for req in reply.body.get("requests", []):
                    await self.probe_one(req)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._probe_now.wait(), self.s.probe_interval_s)

    async def probe_one(self, req: dict[str, Any]) -> dict[str, Any] | None:
        report = await probe_and_report(self.client, self.s, self.metrics, req)
        self.probe_runs += report is not None
        return report

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        self.shim.start(loop)
        if self.acceptor:
            self.acceptor.start(loop)
        log.info("serving the shim on %s%s; following %s as host %s", self.s.socket,
                 f", data port {self.s.shim_port}" if self.acceptor else "",
                 self.s.controller_url, self.s.host)
        tasks = [asyncio.create_task(c) for c in (
            self.sync.run(), self.forwarder.run(), self._housekeeping(), self._capabilities())]
        if self.s.probe_interval_s > 0:
            tasks.append(asyncio.create_task(self._probes()))
        server = None
        if self.s.listen:
            host, port = listen_address(self.s.listen) or ("127.0.0.1", 0)
            server = uvicorn.Server(uvicorn.Config(
                app(self.state, self.metrics.registry, self.refresh_metrics), host=host,
                port=port, log_level="warning", lifespan="off", access_log=False))
            # The agent handles SIGTERM/SIGINT itself (run()); uvicorn must not take them over.
            setattr(server, "capture_signals", contextlib.nullcontext)  # noqa: B010
            tasks.append(asyncio.create_task(server.serve()))
        try:
            await stop.wait()
        finally:
            t_stop = time.monotonic()
            log.info("stopping")
            if self.acceptor:
                self.acceptor.stop()
            self.shim.stop(self.s.socket)
            if server is not None:
                server.should_exit = True
            for t in tasks:
                if t.get_coro().__name__ != "serve":  # type: ignore[union-attr]
                    t.cancel()
            self.forwarder.add_dicts(self.mapper.release(time.time_ns() // 1000 + 10**12))
            await self.forwarder.drain(5.0)
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.client.close()
            log.info("stopped in %.2f s (%d records spooled for later)", time.monotonic() - t_stop,
                     self.spool.pending_records)


SWITCH_INTERVAL_S = 0.0005


def run(settings: AgentSettings) -> None:
    """Run the daemon until SIGTERM or SIGINT."""
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    # Saving the plans and the spool run in threads; the event loop (which answers LOOKUPs)
    # waits for the interpreter lock up to the switch interval at every turn (5 ms by
    # default, a lookup's whole budget). 0.5 ms bounds that wait.
    sys.setswitchinterval(SWITCH_INTERVAL_S)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Agent(settings).run(stop)

    with asyncio.Runner(loop_factory=_loop_factory(settings.uvloop)) as runner:
        runner.run(main())


def _loop_factory(wanted: bool) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (it comes with uvicorn[standard]): each wake-up of the loop
    costs a fraction of asyncio's own, and an 8-GPU host's shims wake it thousands of times a
    second (bench/agent). Without it (or with C4_AGENT_UVLOOP=0), asyncio's default loop."""
    if not wanted:
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


__all__ = ["Agent", "Capabilities", "run"]
