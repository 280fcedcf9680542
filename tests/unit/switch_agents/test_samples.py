"""From recorded walks to samples: each vendor profile's layout, Counter32 unwrapping,
restart epochs. The recordings are snmpsim serving `tests.support.record_walks`' data files
(known rates), replayed by the fake `ReplayClient`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from switch_agents.poller import PollResult, TargetPlan, TargetPoller
from switch_agents.profiles import PROFILES
from switch_agents.recording import ReplayClient
from switch_agents.samples import CounterTracker, select_ports
from switch_agents.snmp import Credentials, Target
from tests.support.record_walks import SWITCHES

DATA = Path(__file__).resolve().parents[2] / "data" / "snmp"


def replay(profile: str, pfc_priorities: tuple[int, ...] | None = None,
           include: tuple[str, ...] | None = None) -> tuple[list[PollResult], ReplayClient]:
    """Two polls replayed; ports selected as the profile's defaults unless `include` says."""
    doc = json.loads((DATA / f"{profile}.json").read_text())
    client = ReplayClient({doc["target"]: doc["polls"]})
    p = PROFILES[profile]
    plan = TargetPlan(doc["target"], Target(doc["target"], "192.0.2.1", 161, Credentials("2c", community="x")),
                      p, include or p.default_ports, p.default_exclude, {}, pfc_priorities)
    poller = TargetPoller(plan, client, "run1")

    async def two() -> list[PollResult]:
        return [await poller.poll(), await poller.poll()]

    return asyncio.run(two()), client


def rates(first: dict[str, Any], second: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per port, per counter: growth per second between two samples."""
    dt = (second["t_us"] - first["t_us"]) / 1e6
    seconds = dt if dt > 0 else 1.0
    out: dict[str, dict[str, float]] = {}
    before = {p["port"]: p for p in first["ports"]}
    for p in second["ports"]:
        row = out[p["port"]] = {}
        for k, v in p.items():
            if isinstance(v, int):
                row[k] = (v - before[p["port"]][k]) / seconds
            elif isinstance(v, dict):
                for prio, n in v.items():
                    row[f"{k}.{prio}"] = (n - before[p["port"]][k][prio]) / seconds
    return out


def uptime_s(profile: str) -> float:
    doc = json.loads((DATA / f"{profile}.json").read_text())
    a, b = (p["1.3.6.1.2.1.1.3.0"][1] for p in doc["polls"])
    return (b - a) / 100.0


@pytest.mark.parametrize("profile", sorted(SWITCHES))
def test_each_profile_reads_its_counters_at_the_recorded_rates(profile: str) -> None:
    (first, second), _ = replay(profile)
    assert first.ok and second.ok, (first.error, second.error)
    assert first.sample is not None and second.sample is not None
    _, data_ports, _ = SWITCHES[profile]
    assert sorted(p["port"] for p in second.sample["ports"]) == sorted(p.name for p in data_ports)
    # The replay's clock is not the recording's: use the recorded sysUpTime for the interval.
    dt = uptime_s(profile)
    got = rates({**first.sample, "t_us": 0}, {**second.sample, "t_us": int(dt * 1e6)})
    for p in data_ports:
        r = got[p.name]
        assert r["tx_bytes"] == pytest.approx(p.tx_bytes, rel=0.03)
        assert r["rx_pkts"] == pytest.approx(p.rx_pkts, rel=0.03)
        assert r["tx_discards"] == pytest.approx(p.discards, abs=1.5)
        if profile in ("sonic", "nexus", "arista", "mellanox"):
            assert r["pfc_rx_pause.3"] == pytest.approx(p.pfc_rx[3], rel=0.05)
            assert r["pfc_tx_pause.4"] == pytest.approx(p.pfc_tx[4], abs=1.5)
            assert r["pfc_rx_pause.0"] == 0
        if profile == "ieee8021":  # per port, reported under priority 3, unwrapped across 2**32
            assert set(k for k in r if k.startswith("pfc")) == {"pfc_rx_pause.3", "pfc_tx_pause.3"}
            assert r["pfc_rx_pause.3"] == pytest.approx(sum(p.pfc_rx.values()), rel=0.05)
        if profile == "arista":  # summed over the two egress queues
            assert r["ecn_marked_pkts"] == pytest.approx(p.ecn, rel=0.05)
        if profile == "mellanox":
            assert r["queue_drops"] == pytest.approx(p.queue_drops, abs=2)
        if profile in ("sonic", "nexus", "ieee8021", "mellanox"):
            assert "ecn_marked_pkts" not in r  # the MIB has none: omitted, never 0


def test_the_ieee_recording_wraps_and_the_agent_unwraps_it() -> None:
    (first, second), _ = replay("ieee8021")
    assert second.wraps >= 1
    assert first.sample is not None and second.sample is not None
    before = {p["port"]: p["pfc_rx_pause"]["3"] for p in first.sample["ports"]}
    after = {p["port"]: p["pfc_rx_pause"]["3"] for p in second.sample["ports"]}
    wrapped = [port for port in after if before[port] > 2**32 - 600 and after[port] > 2**32]
    assert wrapped, (before, after)  # went past 2**32 instead of back to a small number
    assert all(after[port] > before[port] for port in after)


def test_listed_priorities_are_fetched_as_instances_not_walked() -> None:
    (_first, second), client = replay("sonic", pfc_priorities=(3,))
    assert second.sample is not None
    assert all(set(p["pfc_rx_pause"]) == {"3"} for p in second.sample["ports"])
    gets = [n for _, op, n in client.calls if op == "get" and n > 1]
    assert gets == [2 * 3 * 1, 2 * 3 * 1]  # two columns x three ports x one priority, each poll
    walked, _ = replay("sonic")
    assert walked[1].varbinds > second.varbinds


def test_port_globs_and_a_dead_target() -> None:
    (first, _), _ = replay("sonic", include=("Ethernet4",))
    assert first.sample is not None and [p["port"] for p in first.sample["ports"]] == ["Ethernet4"]
    (none, _), _ = replay("sonic", include=("eth*",))
    assert not none.ok and none.error_kind == "no_ports"
    plan = TargetPlan("dead", Target("dead", "192.0.2.9", 161, Credentials("2c", community="x")),
                      PROFILES["sonic"], ("*",), ())
    dead = asyncio.run(TargetPoller(plan, ReplayClient({}), "r").poll())
    assert not dead.ok and dead.error_kind == "timeout" and dead.sample is None


def test_select_ports_renames_after_matching() -> None:
    names = {1: "swp1", 2: "swp2", 3: "eth0", 4: "lo"}
    assert select_ports(names, ("swp*", "eth0"), ("eth*",), {"swp1": "Ethernet0"}) == {1: "Ethernet0", 2: "swp2"}


def test_counter32_unwraps_and_a_restart_starts_a_new_epoch() -> None:
    tracker = CounterTracker("run")
    first = tracker.update(100, {"p": {"pfc_rx_pause.3": (2**32 - 10, 32), "tx_bytes": (5, 64)}})
    assert first.ports == {"p": {"pfc_rx_pause.3": 2**32 - 10, "tx_bytes": 5}} and first.epoch == "run.0"
    wrapped = tracker.update(200, {"p": {"pfc_rx_pause.3": (20, 32), "tx_bytes": (9, 64)}})
    assert wrapped.ports["p"]["pfc_rx_pause.3"] == 2**32 + 20 and wrapped.wraps == 1 and not wrapped.reset
    restarted = tracker.update(50, {"p": {"pfc_rx_pause.3": (3, 32), "tx_bytes": (1, 64)}})
    assert restarted.reset and restarted.epoch == "run.1"
    assert restarted.ports["p"] == {"pfc_rx_pause.3": 3, "tx_bytes": 1}


def test_the_linux_recording_from_debian_snmpd_and_the_pass_persist_extension() -> None:
    """Recorded from snmpd in the netns tier after its load ran (C4_RECORD_WALKS=1)."""
    (first, second), _ = replay("linux")
    assert first.ok and second.ok and second.sample is not None
    ports = {p["port"]: p for p in second.sample["ports"]}
    assert sorted(ports) == ["swp1", "swp2"]  # `lo` excluded by the profile
    egress = ports["swp2"]
    assert egress["ecn_marked_pkts"] > 0 and egress["queue_drops"] > 0 and egress["tx_pkts"] > 0
    assert ports["swp1"]["ecn_marked_pkts"] == 0


def test_oper_status_is_reported_per_selected_port_by_name() -> None:
    from switch_agents.profiles import IF_OPER_STATUS
    from switch_agents.samples import oper_states, sample_doc
    from switch_agents.snmp import Value, oid

    col = oid(IF_OPER_STATUS)
    values = {(*col, 1): Value("integer", 1), (*col, 2): Value("integer", 2), (*col, 3): Value("integer", 7),
              (*col, 4): Value("integer", 99), (*col, 5): Value("counter32", 2), (*col, 9): Value("integer", 2)}
    ports = {1: "Ethernet0", 2: "Ethernet4", 3: "Ethernet8", 4: "Ethernet12", 5: "Ethernet16"}
    oper = oper_states(values, IF_OPER_STATUS, ports)
    # out-of-range values and other types are left out, and so is an interface not selected (9)
    assert oper == {"Ethernet0": "up", "Ethernet4": "down", "Ethernet8": "lowerLayerDown"}
    doc = sample_doc("leaf0", 1, "r.0", {"Ethernet0": {"tx_bytes": 5}}, oper)
    assert doc["ports"] == [{"port": "Ethernet0", "oper_status": "up", "tx_bytes": 5},
                            {"port": "Ethernet4", "oper_status": "down"},
                            {"port": "Ethernet8", "oper_status": "lowerLayerDown"}]
