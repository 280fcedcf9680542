"""Polls one switch: a `TargetPoller` per target, one `poll()` per cycle, a `PollResult` back.

A poll is: GET sysUpTime (restart detection, and proof the switch answers), a walk of
ifName when the names are unknown, older than `names_refresh_s` or the switch restarted,
then one side-by-side GETBULK walk of the profile's columns and ifOperStatus — or, when the target lists
`pfc_priorities`, a walk of the per-interface columns plus GETs of just those priorities'
PFC instances for the selected ports. A failure at any step is a `PollResult` with `error`
(and the duration spent), never an exception: one dead switch costs its own deadline, not
the cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from switch_agents.profiles import (
    DEFAULT_PFC_PRIORITY,
    IF_DESCR,
    IF_NAME,
    IF_OPER_STATUS,
    SYS_UPTIME,
    Profile,
)
from switch_agents.samples import (
    CounterTracker,
    interface_names,
    interval_rates,
    lost_capacity_ports,
    oper_states,
    port_counters,
    sample_doc,
    select_ports,
)
from switch_agents.snmp import Oid, Reply, SnmpClient, Target, oid


@dataclass(frozen=True, slots=True)
class TargetPlan:
    """What to poll on one switch and how to name what comes back."""

    switch: str
    target: Target
    profile: Profile
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    renames: dict[str, str] = field(default_factory=dict)
    pfc_priorities: tuple[int, ...] | None = None
    names_refresh_s: float = 300.0


@dataclass(frozen=True, slots=True)
class PollResult:
    switch: str
    ok: bool
    duration_s: float
    error: str | None = None
    error_kind: str | None = None  # timeout, auth, snmp, no_ports, deadline
    t_us: int | None = None
    sample: dict[str, Any] | None = None
    ports: int = 0
    requests: int = 0
    varbinds: int = 0
    reset: bool = False
    wraps: int = 0
    # Ports whose latest interval looks like lost capacity (`samples.lost_capacity_ports`):
    # the agent may poll the target again soon (`AgentConfig.repoll_after_s`).
    suspect_ports: tuple[str, ...] = ()


# The re-poll trigger compares a port's latest interval with the most it sent in this many
# intervals before it.
RECENT = 3


def _most(recent: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]] | None:
    if not recent:
        return None
    out: dict[str, dict[str, float]] = {}
    for rates in recent:
        for port, r in rates.items():
            if "tx_bytes" in r:
                row = out.setdefault(port, {"tx_bytes": r["tx_bytes"]})
                row["tx_bytes"] = max(row["tx_bytes"], r["tx_bytes"])
    return out


def error_kind(message: str) -> str:
    low = message.lower()
    if "timedout" in low or "timed out" in low or "timeout" in low:
        return "timeout"
    if any(w in low for w in ("digest", "unknownusername", "authentication", "unknown user", "decrypt", "ciphering")):
        return "auth"
    return "snmp"


class TargetPoller:
    def __init__(self, plan: TargetPlan, client: SnmpClient, run_id: str,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall_us: Callable[[], int] = lambda: time.time_ns() // 1000) -> None:
        self.plan = plan
        self.client = client
        self.tracker = CounterTracker(run_id)
        self._monotonic = monotonic
        self._wall_us = wall_us
        self._ports: dict[int, str] = {}
        self._names_at: float | None = None
        self._last_uptime: int | None = None
        self._last: tuple[int, str, dict[str, dict[str, int]]] | None = None  # t_us, epoch, totals
        self._recent: list[dict[str, dict[str, float]]] = []  # the last RECENT intervals' rates
        self._suspects: tuple[str, ...] = ()  # the last sample's suspect ports (`lost_capacity_ports`)
        # Every SNMP request and varbind sent to the target since start, the one awaiting its
        # reply included: what a poll cut off by its deadline had sent (`sent`).
        self.sent_requests = 0
        self.sent_varbinds = 0
        p = plan.profile
        self._walk_columns: list[Oid] = [oid(c.oid) for c in p.columns
                                         if c.index != "if.prio" or plan.pfc_priorities is None]
        self._walk_columns.append(oid(IF_OPER_STATUS))
        self._instance_columns: list[Oid] = [oid(c.oid) for c in p.columns
                                             if c.index == "if.prio" and plan.pfc_priorities is not None]

    def _fail(self, started: float, base: tuple[int, int], message: str, kind: str | None) -> PollResult:
        requests, varbinds = self._since(base)
        return PollResult(self.plan.switch, False, self._monotonic() - started, message,
                          kind or error_kind(message), requests=requests, varbinds=varbinds)

    async def _ask(self, walk: bool, t: Any, oids: list[Any]) -> Reply:
        """One client call, counted in `sent_requests` from the moment it is made (a request
        in flight when the poll is cut off was sent) and corrected by the reply's own count."""
        self.sent_requests += 1
        reply = await (self.client.walk(t, oids) if walk else self.client.get(t, oids))
        self.sent_requests += reply.requests - 1
        self.sent_varbinds += reply.varbinds
        return reply

    def sent(self) -> tuple[int, int]:
        """(requests, varbinds) sent so far: the difference over a poll is what it sent."""
        return self.sent_requests, self.sent_varbinds

    def _since(self, base: tuple[int, int]) -> tuple[int, int]:
        return self.sent_requests - base[0], self.sent_varbinds - base[1]

    async def _names(self) -> tuple[dict[int, str], Reply]:
        t = self.plan.target
        reply = await self._ask(True, t, [oid(IF_NAME)])
        names = interface_names(reply.values, IF_NAME)
        if reply.error is None and not names:
            descr = await self._ask(True, t, [oid(IF_DESCR)])
            return interface_names(descr.values, IF_DESCR), descr
        return names, reply

    async def poll(self) -> PollResult:
        plan, t = self.plan, self.plan.target
        started, base = self._monotonic(), self.sent()
        up = await self._ask(False, t, [oid(SYS_UPTIME)])
        if up.error is not None:
            return self._fail(started, base, up.error, None)
        uptime_value = up.values.get(oid(SYS_UPTIME))
        uptime = int(uptime_value.value) if uptime_value is not None and uptime_value.kind == "timeticks" else None
        restarted = uptime is not None and self._last_uptime is not None and uptime < self._last_uptime
        if restarted or self._names_at is None or started - self._names_at >= plan.names_refresh_s:
            names, reply = await self._names()
            if reply.error is not None:
                return self._fail(started, base, reply.error, None)
            self._ports = select_ports(names, plan.include, plan.exclude, plan.renames)
            self._names_at = started
        if not self._ports:
            return self._fail(started, base, "no interface matches the target's ports", "no_ports")
        values = {}
        # The sample's time is the middle of the requests that read the counters (not of the
        # whole poll: the first one also walks names and warms the engine, ~1 s).
        read_from_us = self._wall_us()
        if self._walk_columns:
            walked = await self._ask(True, t, self._walk_columns)
            if walked.error is not None:
                return self._fail(started, base, walked.error, None)
            values.update(walked.values)
        if self._instance_columns and plan.pfc_priorities:
            wanted = [(*c, i, p) for c in self._instance_columns for i in sorted(self._ports)
                      for p in plan.pfc_priorities]
            got = await self._ask(False, t, wanted)
            if got.error is not None:
                return self._fail(started, base, got.error, None)
            values.update(got.values)
        per_port_priority = plan.pfc_priorities[0] if plan.pfc_priorities else DEFAULT_PFC_PRIORITY
        counters = port_counters(plan.profile, values, self._ports, plan.pfc_priorities, per_port_priority)
        tracked = self.tracker.update(uptime, counters)
        self._last_uptime = uptime if uptime is not None else self._last_uptime
        t_us = (read_from_us + self._wall_us()) // 2
        suspects: tuple[str, ...] = ()
        if self._last is not None and self._last[1] == tracked.epoch:
            rates = interval_rates((self._last[0], self._last[2]), (t_us, tracked.ports))
            suspects = tuple(lost_capacity_ports(_most(self._recent), rates, still=self._suspects))
            self._recent = [*self._recent[-(RECENT - 1):], rates]
        else:
            self._recent = []
        self._last = (t_us, tracked.epoch, tracked.ports)
        self._suspects = suspects
        requests, varbinds = self._since(base)
        return PollResult(plan.switch, True, self._monotonic() - started, t_us=t_us,
                          sample=sample_doc(plan.switch, t_us, tracked.epoch, tracked.ports,
                                            oper_states(values, IF_OPER_STATUS, self._ports)),
                          ports=len(tracked.ports), requests=requests, varbinds=varbinds,
                          reset=tracked.reset, wraps=tracked.wraps, suspect_ports=suspects)
