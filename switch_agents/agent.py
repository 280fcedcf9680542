"""The switch agent process: poll every target each interval, spool and post the samples,
serve `/healthz` and `/metrics`.

One event loop, one `SnmpClient` (so one pysnmp engine) for the process. Each cycle starts on
the interval's grid (`k * interval_s` after start; a cycle that overruns skips the ticks it
missed and counts an overrun), polls at most `concurrency` targets at once, and gives each
target `deadline_s` for its whole poll (the first cycle, which also loads pysnmp and warms
its engines, `FIRST_CYCLE_GRACE_S` more). Results are data: the latest per target is in
`/healthz` and `/metrics`. Posting runs in its own task, so a slow or absent controller
never delays polling. With `repoll_after_s`, a target whose sample shows a port that may have
lost capacity is polled again that long after the cycle (`_repoll`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets as pysecrets
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from switch_agents.config import AgentConfig, Secrets, V2cCredentials
from switch_agents.metrics import AgentMetrics
from switch_agents.poller import PollResult, TargetPlan, TargetPoller
from switch_agents.posting import Poster, Spool
from switch_agents.profiles import PROFILES
from switch_agents.snmp import Credentials, PysnmpClient, SnmpClient, Target

log = logging.getLogger(__name__)
RETRY_POST_S = 2.0
# The first cycle also loads pysnmp and warms its engines (the first request of an engine
# costs ~1 s, SNMPv3 discovery more): it gets this much beyond the per-target deadline.
FIRST_CYCLE_GRACE_S = 5.0
# A re-poll after the first leaves at least this long before the next cycle, checked before its
# sleep and after it: the controller's shortest window that counts towards a confirmation
# (C4_CONGESTION_FAST_CONFIRM_MIN_S; a shorter one only adds to its sums).
MIN_WINDOW_S = 0.2


def build_plans(cfg: AgentConfig, secrets: Secrets) -> list[TargetPlan]:
    plans = []
    for t in cfg.targets:
        cred = cfg.credentials[t.credentials]
        if isinstance(cred, V2cCredentials):
            creds = Credentials("2c", community=secrets.community[t.credentials].get_secret_value())
        else:
            auth = secrets.auth_key.get(t.credentials)
            priv = secrets.priv_key.get(t.credentials)
            creds = Credentials("3", user=cred.user, auth_protocol=cred.auth_protocol,
                                auth_key=auth.get_secret_value() if auth else "", priv_protocol=cred.priv_protocol,
                                priv_key=priv.get_secret_value() if priv else "", context=cred.context)
        profile = PROFILES[t.profile]
        if t.counters is not None:
            profile = replace(profile, columns=tuple(c for c in profile.columns if c.counter in t.counters))
        target = Target(t.switch, t.address, t.port or cfg.snmp.port, creds,
                        t.timeout_s if t.timeout_s is not None else cfg.snmp.timeout_s,
                        t.retries if t.retries is not None else cfg.snmp.retries,
                        cfg.snmp.max_repetitions, cfg.snmp.max_varbinds)
        plans.append(TargetPlan(
            t.switch, target, profile, tuple(t.ports) if t.ports is not None else profile.default_ports,
            tuple(t.exclude_ports) + profile.default_exclude, dict(t.port_names),
            None if t.pfc_priorities is None else tuple(sorted(set(t.pfc_priorities))), cfg.snmp.names_refresh_s))
    return plans


class Agent:
    """Usage: `await Agent(cfg, secrets).run()` (until `stop()`), or `run(cycles=n)`."""

    def __init__(self, cfg: AgentConfig, secrets: Secrets, output: Path | None = None,
                 client_factory: Callable[[], SnmpClient] | None = None) -> None:
        self.cfg = cfg
        self.secrets = secrets
        self.output = output
        self.metrics = AgentMetrics()
        self.run_id = pysecrets.token_hex(4)
        self._client_factory = client_factory or (lambda: PysnmpClient(cfg.snmp.v2c_decoder))
        self._plans = build_plans(cfg, secrets)
        self.latest: dict[str, PollResult] = {}
        self.spool: Spool | None = None
        self.poster: Poster | None = None
        if cfg.controller is not None and output is None:
            self.spool = Spool(cfg.controller.spool_max_samples, cfg.controller.spool_max_age_s)
        self.controller_error: str | None = None
        self.last_post_us: int | None = None
        self._stop = asyncio.Event()
        self._spooled = asyncio.Event()
        self.cycles_done = 0
        self.health_port: int | None = None

    def stop(self) -> None:
        self._stop.set()
        self._spooled.set()

    async def run(self, cycles: int | None = None) -> None:
        client = self._client_factory()
        pollers = [TargetPoller(p, client, self.run_id) for p in self._plans]
        server = None
        if self.cfg.listen:
            from switch_agents.health import serve  # uvicorn/starlette only when serving

            server = await serve(self, self.cfg.listen)
        post_task = None
        if self.spool is not None and self.cfg.controller is not None and self.secrets.token is not None:
            c = self.cfg.controller
            self.poster = Poster(c.url, self.secrets.token.get_secret_value(), c.timeout_s, c.batch_max_samples)
            post_task = asyncio.create_task(self._post_loop())
        out = self.output.open("a") if self.output is not None else None
        try:
            start = time.monotonic()
            tick = 0
            while not self._stop.is_set():
                began = time.monotonic()
                results = await self.cycle(pollers)
                self._record(results, time.monotonic() - began, out)
                if cycles is not None and self.cycles_done >= cycles:
                    break
                tick += 1
                due = start + tick * self.cfg.interval_s
                now = time.monotonic()
                if now > due:
                    missed = int((now - due) // self.cfg.interval_s) + 1
                    self.metrics.overruns.inc()
                    tick += missed
                    due = start + tick * self.cfg.interval_s
                await self._repoll(pollers, results, due, out)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), due - time.monotonic())
            if post_task is not None and self.spool is not None:
                # One last try to hand over what is spooled, bounded by the POST timeout.
                with contextlib.suppress(Exception):
                    await self._flush()
        finally:
            if post_task is not None:
                post_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await post_task
            if self.poster is not None:
                await self.poster.close()
            if out is not None:
                out.close()
            await client.close()
            if server is not None:
                await server.stop()

    async def _repoll(self, pollers: list[TargetPoller], results: list[PollResult], due: float, out: Any) -> None:
        """Poll the targets of this cycle's results with a port that looks like lost capacity
        again, `repoll_after_s` from now, if that leaves `repoll_after_s` before the next cycle
        (`due`); those whose re-poll still shows one, again, up to `repolls_per_interval` times,
        each leaving at least `MIN_WINDOW_S` before the next cycle (checked again after the
        sleep: a loop that woke late skips it). The controller's detector
        confirms lost capacity on the windows after the first sample once they span
        `C4_CONGESTION_FAST_CONFIRM_SPAN_S` (0.7 s; one sample cannot tell it from traffic that
        ended inside the interval, one short window not from a compute gap): this brings them
        in a fraction of an interval. A re-poll that fails (a slow target out of time) is not a
        failed poll: the target's status stays its regular poll's (`_record`)."""
        after = self.cfg.repoll_after_s
        again = [p for p, r in zip(pollers, results, strict=True) if r.ok and r.suspect_ports]
        leave = after  # what a re-poll must leave before the next cycle: the first, `after`
        for _ in range(self.cfg.repolls_per_interval):
            if not after or not again or time.monotonic() + after + leave > due:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), after)
            # again after the sleep: a loop that woke late (a busy host) may no longer leave it
            if self._stop.is_set() or time.monotonic() + leave > due:
                return
            self.metrics.repolls.inc(len(again))
            began = time.monotonic()
            got = await self.cycle(again, deadline=max(0.05, min(self.cfg.deadline_s, due - began)))
            self._record(got, time.monotonic() - began, out, repoll=True)
            again = [p for p, r in zip(again, got, strict=True) if r.ok and r.suspect_ports]
            leave = MIN_WINDOW_S

    async def cycle(self, pollers: list[TargetPoller], deadline: float | None = None) -> list[PollResult]:
        gate = asyncio.Semaphore(self.cfg.concurrency)
        if deadline is None:
            deadline = self.cfg.deadline_s + (FIRST_CYCLE_GRACE_S if self.cycles_done == 0 else 0.0)

        async def one(p: TargetPoller) -> PollResult:
            async with gate:
                began = time.monotonic()
                requests, varbinds = p.sent()
                try:
                    return await asyncio.wait_for(p.poll(), deadline)
                except TimeoutError:
                    # What it sent before the cut (the request in flight counted; the varbinds
                    # of unanswered requests are not known).
                    now_requests, now_varbinds = p.sent()
                    return PollResult(p.plan.switch, False, time.monotonic() - began,
                                      f"poll did not finish within {deadline:g} s", "deadline",
                                      requests=now_requests - requests, varbinds=now_varbinds - varbinds)

        return list(await asyncio.gather(*(one(p) for p in pollers)))

    def _record(self, results: list[PollResult], cycle_s: float, out: Any, repoll: bool = False) -> None:
        m = self.metrics
        samples = []
        for r in results:
            m.varbinds.inc(r.varbinds)  # every poll's, a failed re-poll's too (what it sent before
            m.requests.inc(r.requests)  # it failed; one cut off by its deadline, what it sent before)
            if repoll and not (r.ok and r.sample is not None):
                # An early poll out of time (its deadline is what is left of the interval) or
                # failed: the target answered its regular poll; its next one says whether it
                # is down. Counted apart, logged, never a failed poll.
                m.repolls_failed.labels(r.switch).inc()
                log.info("early re-poll of %s failed after %.2f s: %s", r.switch, r.duration_s, r.error)
                continue
            self.latest[r.switch] = r
            m.poll_duration.labels(r.switch).set(r.duration_s)
            m.poll_seconds.observe(r.duration_s)
            m.target_up.labels(r.switch).set(1 if r.ok else 0)
            if r.ok and r.sample is not None:
                m.samples.labels(r.switch).inc(r.ports)
                samples.append(r.sample)
                if r.reset:
                    m.resets.labels(r.switch).inc()
                    log.warning("%s restarted (sysUpTime went back): new counter epoch %s", r.switch,
                                r.sample["counter_epoch"])
                if r.wraps:
                    m.wraps.labels(r.switch).inc(r.wraps)
            else:
                m.errors.labels(r.switch, r.error_kind or "snmp").inc()
                log.warning("poll of %s failed after %.2f s: %s", r.switch, r.duration_s, r.error)
        if not repoll:
            m.cycles.inc()
            m.cycle_seconds.set(cycle_s)
            self.cycles_done += 1
        if out is not None and samples:
            out.write(json.dumps({"samples": samples}, separators=(",", ":")) + "\n")
            out.flush()
        if self.spool is not None and samples:
            dropped = self.spool.add(samples, time.monotonic())
            if dropped:
                m.dropped.labels("spool_full").inc(dropped)
            m.spool.set(len(self.spool))
            self._spooled.set()

    async def _flush(self) -> bool:
        """Post until the spool is empty or the controller fails; True if it is empty."""
        assert self.spool is not None and self.poster is not None
        m = self.metrics
        while len(self.spool):
            expired = self.spool.expire(time.monotonic())
            if expired:
                m.dropped.labels("expired").inc(expired)
                log.warning("dropped %d samples older than %g s (controller unreachable: %s)", expired,
                            self.spool.max_age_s, self.controller_error)
            if not len(self.spool):
                break
            outcome = await self.poster.post_one(self.spool)
            m.spool.set(len(self.spool))
            if outcome.sent:
                m.posts.labels("accepted").inc()
                m.posted.inc(outcome.sent)
                m.controller_up.set(1)
                self.controller_error = None
                self.last_post_us = time.time_ns() // 1000
                if outcome.ignored:
                    m.ignored.inc(len(outcome.ignored))
                    log.info("controller ignored (not in its fabric): %s", "; ".join(outcome.ignored[:5]))
                continue
            if outcome.dropped:
                m.posts.labels("refused").inc()
                m.dropped.labels("refused").inc(outcome.dropped)
                m.controller_up.set(1)
                self.controller_error = outcome.error
                continue
            m.posts.labels("failed").inc()
            m.controller_up.set(0)
            if outcome.error != self.controller_error:
                log.warning("controller unreachable, %d samples spooled: %s", len(self.spool), outcome.error)
            self.controller_error = outcome.error
            return False
        return True

    async def _post_loop(self) -> None:
        while not self._stop.is_set():
            await self._spooled.wait()
            self._spooled.clear()
            emptied = await self._flush()
            if not emptied:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), RETRY_POST_S)
                self._spooled.set()

    def health(self) -> dict[str, Any]:
        """`/healthz`: the agent loop's state, every target's latest poll, the controller link."""
        targets: dict[str, dict[str, Any]] = {}
        failing = 0
        for plan in self._plans:
            r = self.latest.get(plan.switch)
            if r is None:
                targets[plan.switch] = {"status": "pending"}
                continue
            failing += 0 if r.ok else 1
            targets[plan.switch] = {"status": "ok" if r.ok else "failing", "error": r.error, "error_kind": r.error_kind,
                                    "duration_s": round(r.duration_s, 4), "t_us": r.t_us, "ports": r.ports}
        controller: dict[str, Any] = {"configured": self.spool is not None}
        if self.spool is not None:
            now = time.monotonic()
            controller.update({"reachable": self.controller_error is None, "error": self.controller_error,
                               "last_post_us": self.last_post_us, "spooled_samples": len(self.spool),
                               "oldest_spooled_s": round(self.spool.oldest_age_s(now), 3)})
        degraded = failing > 0 or (self.spool is not None and self.controller_error is not None)
        return {"status": "degraded" if degraded else "ok", "cycles": self.cycles_done,
                "interval_s": self.cfg.interval_s, "targets_failing": failing, "targets": targets,
                "controller": controller, "run_id": self.run_id}
