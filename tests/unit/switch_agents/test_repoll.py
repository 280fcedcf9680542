"""The early re-poll (`AgentConfig.repoll_after_s`): a target whose sample shows a port that may
have lost capacity (its rate fell while it marks) is polled again soon, so the controller's
detector can confirm lost capacity without waiting a whole interval (`te.congestion`, 5)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from switch_agents.agent import Agent
from switch_agents.config import parse, resolve_secrets
from switch_agents.poller import PollResult, TargetPlan, TargetPoller
from switch_agents.profiles import C4_QDISC_BASE, IF_NAME, PROFILES, SYS_UPTIME
from switch_agents.recording import ReplayClient
from switch_agents.samples import lost_capacity_ports
from switch_agents.snmp import Credentials, Target

MBIT = 1e6 / 8


def _poll(uptime: int, ports: dict[int, tuple[int, int, int]]) -> dict[str, Any]:
    """One recorded poll of the `linux` profile: per ifIndex (tx bytes, tx packets, CE marks)."""
    doc: dict[str, Any] = {SYS_UPTIME: ["timeticks", uptime]}
    for i, (octets, pkts, marks) in ports.items():
        doc[f"{IF_NAME}.{i}"] = ["string", f"eth{i}"]
        doc[f"{C4_QDISC_BASE}.1.1.6.{i}"] = ["counter64", octets]
        doc[f"{C4_QDISC_BASE}.1.1.7.{i}"] = ["counter64", pkts]
        doc[f"{C4_QDISC_BASE}.1.1.3.{i}"] = ["counter64", marks]
    return doc


def _suspects(intervals: list[dict[int, tuple[float, int, int]]]) -> list[tuple[str, ...]]:
    """Polls 1 s apart; `intervals`: per interval, per port, (Mbit/s, packets, marks); marks -1:
    the mark counter restarts from 0 (the testbed's marker is rebuilt when a link's rate changes)."""
    totals = {1: [0, 0, 0], 2: [0, 0, 0]}
    polls = [_poll(100, {i: (0, 0, 0) for i in totals})]
    for k, step in enumerate(intervals, start=1):
        for i, (mbit, pkts, marks) in step.items():
            t = totals[i]
            t[0], t[1], t[2] = t[0] + int(mbit * MBIT), t[1] + pkts, (0 if marks < 0 else t[2] + marks)
        polls.append(_poll(100 + 100 * k, {i: (t[0], t[1], t[2]) for i, t in totals.items()}))
    clock = iter(range(0, 10**9, 500_000))  # two reads per poll: t_us = k s
    p = PROFILES["linux"]
    plan = TargetPlan("leaf0", Target("leaf0", "192.0.2.1", 161, Credentials("2c", community="x")), p,
                      p.default_ports, p.default_exclude)
    poller = TargetPoller(plan, ReplayClient({"leaf0": polls}), "run1", wall_us=lambda: next(clock))

    async def run() -> list[PollResult]:
        return [await poller.poll() for _ in polls]

    return [r.suspect_ports for r in asyncio.run(run())]


def test_a_port_whose_rate_falls_while_it_marks_is_a_suspect_rising_or_quiet_ports_are_not() -> None:
    steady = {1: (49.0, 1000, 30), 2: (20.0, 400, 0)}
    throttled = {1: (12.0, 260, 22), 2: (20.0, 400, 0)}
    got = _suspects([steady, steady,
                     {1: (12.0, 260, 22), 2: (30.0, 600, 20)},    # eth1 throttled; eth2 marks but rises
                     {1: (12.0, 260, 22), 2: (10.0, 200, 0)},     # eth2 falls, no marks
                     throttled, throttled, throttled])
    # eth1 is compared with the most of the 3 intervals before: a suspect until they are all slow
    assert got == [(), (), (), ("eth1",), ("eth1",), ("eth1",), (), ()]
    # The first slow interval has no readable mark count (the counter restarted): the next one
    # that marks is still a suspect (the detector's smoothed rate remembers the fall).
    got = _suspects([steady, steady, {1: (12.0, 260, -1), 2: (20.0, 400, 0)}, throttled])
    assert got[3:] == [(), ("eth1",)]


def test_a_suspect_stays_one_while_its_rate_stays_down_even_in_a_window_without_marks() -> None:
    """Testbed, 2 s polls: the 0.4 s re-poll window after a throttled link's first whole slow
    interval read 0 marks (its rate-based marker marks while the queue grows, not while it
    stands), so the re-polls stopped and the controller's confirmation waited 1.6 s for the
    next regular poll. A suspect now stays one on the fall alone; a port that falls without
    marks and was no suspect is still none, and one whose rate came back is dropped."""
    steady = {1: (49.0, 1000, 30), 2: (20.0, 400, 0)}
    got = _suspects([steady, steady,
                     {1: (12.0, 260, 22), 2: (10.0, 200, 0)},   # eth1 throttled, marks; eth2 falls, no marks
                     {1: (12.0, 260, 0), 2: (10.0, 200, 0)},    # eth1 still slow, no marks in this window
                     {1: (48.0, 1000, 0), 2: (10.0, 200, 0)}])  # eth1 back at its rate
    assert got == [(), (), (), ("eth1",), ("eth1",), ()]


def test_lost_capacity_ports_needs_the_fall_and_the_marks() -> None:
    before = {"a": {"tx_bytes": 100.0}, "b": {"tx_bytes": 100.0}, "c": {"tx_bytes": 100.0}}
    latest = {"a": {"tx_bytes": 50.0, "tx_pkts": 100.0, "ecn_marked_pkts": 1.0},   # fell, 1 % marked
              "b": {"tx_bytes": 95.0, "tx_pkts": 100.0, "ecn_marked_pkts": 10.0},  # 5 % under: no fall
              "c": {"tx_bytes": 50.0, "tx_pkts": 100.0, "pfc_rx_pause.3": 20.0}}   # fell, paused
    assert lost_capacity_ports(before, latest) == ["a", "c"]
    assert lost_capacity_ports(None, latest) == []
    quiet = {"a": {"tx_bytes": 50.0, "tx_pkts": 100.0, "ecn_marked_pkts": 0.0},   # fell, no marks
             "b": {"tx_bytes": 95.0, "tx_pkts": 100.0, "ecn_marked_pkts": 0.0}}   # no fall
    assert lost_capacity_ports(before, quiet) == []
    assert lost_capacity_ports(before, quiet, still=("a", "b")) == ["a"]  # a suspect before: the fall suffices


class _Counting:
    """A stand-in poller: counts its polls."""

    def __init__(self, name: str) -> None:
        self.name, self.polls = name, 0

    async def poll(self) -> PollResult:
        self.polls += 1
        return PollResult(self.name, True, 0.0)

    def sent(self) -> tuple[int, int]:
        return 0, 0


def _agent(repoll_after_s: float) -> Agent:
    text = (f'interval_s = 1\nrepoll_after_s = {repoll_after_s}\nlisten = ""\n'
            '[credentials.c]\nversion = "2c"\ncommunity_env = "C"\n'
            '[[targets]]\nswitch = "leaf0"\naddress = "192.0.2.1"\nprofile = "linux"\ncredentials = "c"\n'
            '[[targets]]\nswitch = "leaf1"\naddress = "192.0.2.2"\nprofile = "linux"\ncredentials = "c"\n')
    cfg = parse(text)
    return Agent(cfg, resolve_secrets(cfg, {"C": "public"}))


def test_only_targets_with_a_suspect_port_are_polled_again_and_only_with_room_before_the_next_cycle() -> None:
    a, b = _Counting("leaf0"), _Counting("leaf1")
    results = [PollResult("leaf0", True, 0.0), PollResult("leaf1", True, 0.0, suspect_ports=("eth1",))]

    async def once(agent: Agent, due_in_s: float) -> None:
        loop = asyncio.get_running_loop()
        await agent._repoll([a, b], results, loop.time() + due_in_s, None)  # type: ignore[list-item]

    agent = _agent(0.2)
    asyncio.run(once(agent, 1.0))
    assert (a.polls, b.polls) == (0, 1)
    assert agent.cycles_done == 0 and agent.metrics.repolls._value.get() == 1  # not a cycle
    asyncio.run(once(agent, 0.3))  # 2 x 0.2 s does not fit before the next cycle
    asyncio.run(once(_agent(0), 1.0))  # off
    assert (a.polls, b.polls) == (0, 1)


class _Scripted:
    """A stand-in poller whose polls answer from a script: "suspect", "calm", "hang" (out of
    time), or "fail" (an SNMP timeout after two requests)."""

    def __init__(self, name: str, script: list[str]) -> None:
        self.name, self.script, self.polls = name, script, 0
        self.plan = SimpleNamespace(switch=name)
        self.requests = 0

    def sent(self) -> tuple[int, int]:
        return self.requests, 0

    async def poll(self) -> PollResult:
        what = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        if what == "hang":
            self.requests += 1  # a request in flight
            await asyncio.sleep(30)
        if what == "fail":
            return PollResult(self.name, False, 2.0, "requestTimedOut", "timeout", requests=2, varbinds=1)
        sample = {"switch": self.name, "t_us": self.polls, "counter_epoch": "e", "ports": []}
        return PollResult(self.name, True, 0.0, sample=sample, ports=1,
                          suspect_ports=("eth1",) if what == "suspect" else ())


def test_a_target_still_suspect_is_polled_again_up_to_repolls_per_interval() -> None:
    """The controller confirms lost capacity once the windows after the first sample span
    0.7 s (`C4_CONGESTION_FAST_CONFIRM_SPAN_S`): with re-polls 0.2 s apart, a target whose
    re-poll still shows the port is polled again (twice by default), one that no longer does
    is not."""
    still, calm = _Scripted("leaf0", ["suspect"]), _Scripted("leaf1", ["calm"])
    results = [PollResult("leaf0", True, 0.0, suspect_ports=("eth1",)),
               PollResult("leaf1", True, 0.0, suspect_ports=("eth2",))]

    async def once(agent: Agent) -> None:
        loop = asyncio.get_running_loop()
        await agent._repoll([still, calm], results, loop.time() + 1.0, None)  # type: ignore[list-item]

    agent = _agent(0.2)
    asyncio.run(once(agent))
    assert (still.polls, calm.polls) == (2, 1)
    assert agent.metrics.repolls._value.get() == 3


def test_a_re_poll_out_of_time_is_not_a_failed_poll() -> None:
    """A slow target's re-poll that runs out of what is left of the interval said the target
    was down (`c4_switch_agent_target_up` 0, an error counted, `/healthz` showing the failure)
    though it answered its regular poll: now it is counted apart and changes nothing else."""
    slow = _Scripted("leaf0", ["hang"])
    agent = _agent(0.2)
    regular = PollResult("leaf0", True, 0.05, sample={"switch": "leaf0", "t_us": 1, "counter_epoch": "e",
                                                      "ports": []}, ports=1, suspect_ports=("eth1",))
    agent._record([regular], 0.05, None)

    async def once() -> None:
        loop = asyncio.get_running_loop()
        await agent._repoll([slow], [regular], loop.time() + 0.6, None)  # type: ignore[list-item]

    asyncio.run(once())
    m = agent.metrics
    assert slow.polls == 1
    assert m.target_up.labels("leaf0")._value.get() == 1
    assert agent.latest["leaf0"] is regular
    assert m.repolls_failed.labels("leaf0")._value.get() == 1
    assert not any(s.labels[0] == "leaf0" for s in m.errors.collect()[0].samples if s.value)  # type: ignore[attr-defined]


def test_a_failed_re_poll_counts_its_requests() -> None:
    """Review: a failed re-poll's SNMP requests (and varbinds) were left out of
    `c4_switch_agent_snmp_requests_total` (and `_varbinds_total`): what the agent sent a
    switch read low exactly when re-polls failed. (A poll cut off by its deadline: the test
    below.)"""
    flaky = _Scripted("leaf0", ["fail"])
    agent = _agent(0.2)
    regular = PollResult("leaf0", True, 0.05, sample={"switch": "leaf0", "t_us": 1, "counter_epoch": "e",
                                                      "ports": []}, ports=1, suspect_ports=("eth1",),
                         requests=3, varbinds=40)
    agent._record([regular], 0.05, None)

    async def once() -> None:
        loop = asyncio.get_running_loop()
        await agent._repoll([flaky], [regular], loop.time() + 1.0, None)  # type: ignore[list-item]

    asyncio.run(once())
    m = agent.metrics
    assert flaky.polls == 1 and m.repolls_failed.labels("leaf0")._value.get() == 1
    assert m.requests._value.get() == 5 and m.varbinds._value.get() == 41
    assert agent.latest["leaf0"] is regular and m.target_up.labels("leaf0")._value.get() == 1


def test_a_re_poll_woken_late_is_not_made_if_it_no_longer_leaves_its_window() -> None:
    """Review: whether a re-poll leaves its window before the next cycle was checked before the
    sleep only; a loop that woke late (a busy host: here one callback holds it 0.5 s) re-polled
    anyway, 0.1 s before the next cycle, whose window then fell under the controller's 0.2 s
    (`C4_CONGESTION_FAST_CONFIRM_MIN_S`). Checked again after the sleep now: no re-poll. (0.6 s
    before the next cycle leaves 0.2 s of margin at the first check.)"""
    target = _Scripted("leaf0", ["suspect"])
    results = [PollResult("leaf0", True, 0.0, suspect_ports=("eth1",))]
    agent = _agent(0.2)

    async def once() -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + 0.6
        loop.call_later(0.05, time.sleep, 0.5)  # the loop is busy from 0.05 s to 0.55 s
        await agent._repoll([target], results, due, None)  # type: ignore[list-item]

    asyncio.run(once())
    assert target.polls == 0 and agent.metrics.repolls._value.get() == 0


class _Hanging(ReplayClient):
    """Answers sysUpTime, then never answers the walk (a switch gone quiet mid-poll)."""

    async def walk(self, target: Target, columns: list[Any]) -> Any:
        await asyncio.sleep(30)
        raise AssertionError("not reached")


def test_a_poll_cut_off_by_its_deadline_counts_what_it_sent() -> None:
    """Review: a poll cut off by its deadline reported 0 requests, so
    `c4_switch_agent_snmp_requests_total` read low exactly for the switches that stopped
    answering. The poller counts a request from the moment it is made: the get that was
    answered and the walk in flight are 2 requests."""
    p = PROFILES["linux"]
    plan = TargetPlan("leaf0", Target("leaf0", "192.0.2.1", 161, Credentials("2c", community="x")), p,
                      p.default_ports, p.default_exclude)
    poller = TargetPoller(plan, _Hanging({"leaf0": [_poll(100, {1: (0, 0, 0)})]}), "run1")
    agent = _agent(0.2)
    got = asyncio.run(agent.cycle([poller], deadline=0.2))  # type: ignore[list-item]
    assert got[0].error_kind == "deadline" and got[0].requests == 2 and got[0].varbinds == 1
    agent._record(got, 0.2, None)
    assert agent.metrics.requests._value.get() == 2
