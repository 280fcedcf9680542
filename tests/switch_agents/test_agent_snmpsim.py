"""The switch agent against snmpsim, end to end: real SNMP (v2c and v3) over loopback, the
agent as its own process posting to a real controller over HTTP.

Physics: snmpsim's counters grow at the rates written in its data files
(`tests.support.snmpsim`), so every expected figure below is a rate chosen here. Four
vendor profiles at once (SONiC with listed priorities, Arista with ECN, IEEE8021-PFC with
Counter32s that wrap every ~3 s, Mellanox over SNMPv3 authPriv), one switch that never
answers, one port the fabric does not have."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.snmpsim import (
    V3_AUTH,
    V3_PRIV,
    V3_USER,
    PortRates,
    Snmpsim,
    free_udp_port,
    switch_records,
    write_switch,
)
from tests.switch_agents.conftest import (
    Controller,
    agent_config,
    free_tcp_port,
    make_controller,
    start_agent,
    wait_for,
)

pytestmark = [pytest.mark.snmp, pytest.mark.usefixtures("need_snmpsim")]

MEAN_TOL = 0.1  # time-weighted mean of a series vs the data file's rate
INTERVAL_TOL = 0.5  # one interval's rate vs the data file's rate
WRAP_RATE = 1.4e9  # spine0's ifOutDiscards (Counter32): wraps every 3.07 s
SWITCHES: dict[str, tuple[str, list[PortRates]]] = {
    "leaf0": ("sonic", [
        PortRates(1, "Ethernet0", tx_bytes=2.5e9, rx_bytes=1.5e9, tx_pkts=2e6, rx_pkts=1e6, pfc_rx={3: 120.0}),
        PortRates(5, "Ethernet4", tx_bytes=1e9, rx_bytes=2e9, tx_pkts=1e6, rx_pkts=1e6),
        PortRates(9, "Ethernet8", tx_bytes=3e9, rx_bytes=4e9, tx_pkts=2e6, rx_pkts=3e6, pfc_tx={3: 50.0}),
        PortRates(13, "Ethernet12", tx_bytes=1e6, rx_bytes=1e6),  # not in the fabric
        PortRates(10000, "eth0", tx_bytes=1e3, rx_bytes=1e3)]),  # management: not reported
    "leaf1": ("arista", [
        PortRates(1, "Ethernet1", tx_bytes=2e9, rx_bytes=1e9, tx_pkts=2e6, rx_pkts=1e6, ecn=2e5),
        PortRates(2, "Ethernet2", tx_bytes=1e9, rx_bytes=1e9, tx_pkts=1e6, rx_pkts=1e6)]),
    "spine0": ("ieee8021", [
        PortRates(1, "Ethernet0", tx_bytes=1.5e9, rx_bytes=2.5e9, tx_pkts=1e6, rx_pkts=2e6, pfc_rx={3: 300.0},
                  discards=WRAP_RATE),
        PortRates(2, "Ethernet1", tx_bytes=1e9, rx_bytes=2e9, tx_pkts=1e6, rx_pkts=2e6)]),
    "spine1": ("mellanox", [
        PortRates(1, "Eth1/1", tx_bytes=2e9, rx_bytes=1e9, tx_pkts=1e6, rx_pkts=1e6, queue_drops=800.0),
        PortRates(2, "Eth1/2", tx_bytes=1e9, rx_bytes=1e9, tx_pkts=1e6, rx_pkts=1e6)]),
}
FABRIC = {
    "name": "snmpsim",
    "switches": [{"name": n, "role": "leaf" if n.startswith("leaf") else "spine"}
                 for n in ("leaf0", "leaf1", "leaf2", "spine0", "spine1")],
    "links": [
        {"a": "leaf0", "a_port": "Ethernet0", "b": "spine0", "b_port": "Ethernet0", "capacity_gbps": 100},
        {"a": "leaf0", "a_port": "Ethernet4", "b": "spine1", "b_port": "Eth1/1", "capacity_gbps": 100},
        {"a": "leaf1", "a_port": "Ethernet1", "b": "spine0", "b_port": "Ethernet1", "capacity_gbps": 100},
        {"a": "leaf1", "a_port": "Ethernet2", "b": "spine1", "b_port": "Eth1/2", "capacity_gbps": 100},
        {"a": "leaf2", "a_port": "Ethernet0", "b": "spine0", "b_port": "Ethernet9", "capacity_gbps": 100},
    ],
    "hosts": [{"name": "host0", "nics": [{"name": "mlx5_0", "ports": [
        {"name": "p0", "address": "10.0.0.2", "switch": "leaf0", "switch_port": "Ethernet8", "capacity_gbps": 100}]}]}],
}
L0S0 = "leaf0:Ethernet0--spine0:Ethernet0"
L0S1 = "leaf0:Ethernet4--spine1:Eth1/1"
L1S0 = "leaf1:Ethernet1--spine0:Ethernet1"
HOST = "host0:mlx5_0:p0--leaf0:Ethernet8"


@pytest.fixture(scope="module")
def snmpsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpsim]:
    data = tmp_path_factory.mktemp("snmpsim") / "data"
    data.mkdir()
    for name, (profile, ports) in SWITCHES.items():
        write_switch(data, name, switch_records(profile, name, ports, c32_initial=2**32 - 10**6))
    sim = Snmpsim(data).start("leaf0")
    yield sim
    sim.stop()


def credentials() -> str:
    out = []
    for name in ("leaf0", "leaf1", "spine0", "leaf2"):
        out += [f"[credentials.{name}]", 'version = "2c"', f'community_env = "C4T_COMMUNITY_{name.upper()}"']
    out += ["[credentials.spine1]", 'version = "3"', f'user = "{V3_USER}"', 'auth_protocol = "sha"',
            'auth_key_env = "C4T_AUTH"', 'priv_protocol = "aes"', 'priv_key_env = "C4T_PRIV"', 'context = "spine1"']
    return "\n".join(out)


def env(priv: str = V3_PRIV) -> dict[str, str]:
    out = {f"C4T_COMMUNITY_{n.upper()}": n for n in ("leaf0", "leaf1", "spine0", "leaf2")}
    return {**out, "C4T_AUTH": V3_AUTH, "C4T_PRIV": priv}


def targets(sim: Snmpsim, dead_port: int) -> list[dict[str, Any]]:
    base = {"address": "127.0.0.1", "port": sim.port}
    return [
        {"switch": "leaf0", "profile": "sonic", "credentials": "leaf0", "pfc_priorities": [3], **base},
        {"switch": "leaf1", "profile": "arista", "credentials": "leaf1", **base},
        {"switch": "spine0", "profile": "ieee8021", "credentials": "spine0", **base},
        {"switch": "spine1", "profile": "mellanox", "credentials": "spine1", **base},
        {"switch": "leaf2", "profile": "sonic", "credentials": "leaf2", "address": "127.0.0.1", "port": dead_port,
         "timeout_s": 0.3, "retries": 0},
    ]


def mean(points: list[dict[str, Any]], key: str, priority: str | None = None) -> float:
    """Time-weighted mean of a raw rate over a series: the counter's growth from the first
    sample to the last over the time between them (read-timing errors only at the ends)."""
    def value(p: dict[str, Any]) -> float:
        return float(p["raw"]["pfc_pauses_per_s"][priority] if key == "pfc" else p["raw"][key])

    return sum(value(p) * p["interval_s"] for p in points) / sum(p["interval_s"] for p in points)


def smoothed_matches(points: list[dict[str, Any]], value: float, tau_s: float = 15.0) -> bool:
    """Whether `value` is the EWMA of the series' byte rates (time constant `tau_s`, the
    controller's default) over all its points or all but the last (a sample may land between
    the two reads), as te/congestion.py's docstring defines it: the first sample whole, then
    `alpha = 1 - exp(-interval_s / tau)`."""
    fits, ewma = [], None
    for p in points:
        rate = float(p["raw"]["bytes_per_s"])
        ewma = rate if ewma is None else ewma + (1 - math.exp(-p["interval_s"] / tau_s)) * (rate - ewma)
        fits.append(ewma)
    return any(v == pytest.approx(value, rel=1e-6) for v in fits[-2:])


def series(c: httpx.Client, link: str) -> dict[str, Any]:
    body: dict[str, Any] = c.get(f"/v1/links/{link}/series", params={"window_s": 120}).json()
    return body


def test_agent_polls_four_vendor_profiles_into_the_controller(tmp_path: Path, snmpsim: Snmpsim,
                                                              controller: Controller) -> None:
    c = controller.client()
    assert c.put("/v1/topology", json=FABRIC).status_code == 200
    health_port = free_tcp_port()
    cfg = agent_config(tmp_path / "agent.toml", targets(snmpsim, free_udp_port()), controller,
                       listen_port=health_port, credentials=credentials())
    agent = start_agent(cfg, env())
    try:
        # Five intervals of spine0 span more than one Counter32 wrap (every 3.07 s).
        wait_for(lambda: len(series(c, L1S0)["ba"]) >= 5, 40, "five samples of spine0 -> leaf1")
        # One cycle starved of CPU (snmpsim answers SNMPv3 authPriv in Python on the same cores)
        # misses the per-target deadline for live targets too, and health says so at that
        # moment: read it until a cycle's word is in, the live targets ok again.
        last: list[dict[str, Any]] = []

        def settled() -> dict[str, Any] | None:
            last[:] = [httpx.get(f"http://127.0.0.1:{health_port}/healthz").json()]
            ok = all(last[0]["targets"][n]["status"] == "ok" for n in SWITCHES)
            return last[0] if ok and last[0]["targets"]["leaf2"]["status"] == "failing" else None

        try:
            health = wait_for(settled, 15, "a health read with every live target ok", step_s=0.2)
        except AssertionError:
            health = last[0]  # the asserts below say what it held
        metrics = httpx.get(f"http://127.0.0.1:{health_port}/metrics").text
        links = {x["name"]: x for x in c.get("/v1/links").json()["links"]}
        s_l0s0, s_l1s0 = series(c, L0S0), series(c, L1S0)
        congestion = c.get("/v1/congestion").json()["congested"]
        controller_metrics = c.get("/metrics").text
    finally:
        code = agent.stop()
    assert code == 0, agent.output()

    def raw(points: list[dict[str, Any]], key: str) -> list[Any]:
        return [p["raw"][key] for p in points]

    # Each interval's rate is the data file's, up to when the agent's reads happened: on this
    # shared 2-core machine (load 6-8 from other test runs) a read can lag 300 ms in a 1 s
    # interval. Over the whole series (the time-weighted mean: counter growth from first to
    # last sample over the time between them) within MEAN_TOL, every interval within
    # INTERVAL_TOL; the smoothed `measured` (tau 15 s weighs the first intervals most) too.
    for points, key, rate in [(s_l0s0["ab"], "bytes_per_s", 2.5e9), (s_l0s0["ba"], "bytes_per_s", 1.5e9)]:
        got = raw(points, key)
        assert mean(points, key) == pytest.approx(rate, rel=MEAN_TOL) and all(x == pytest.approx(rate, rel=INTERVAL_TOL) for x in got), got
    # The smoothed `measured` is the detector's EWMA (tau 15 s) of exactly these samples: it
    # weighs the first interval most (0.77 of five), so it carries that one read's timing
    # error (under load 12 % off the file's rate in one of three runs) and is checked against
    # the EWMA of the series, whose rates the checks above hold to the file's.
    m = links[L0S0]["measured"]
    assert smoothed_matches(s_l0s0["ab"], m["ab"]["bytes_per_s"]), (m["ab"], raw(s_l0s0["ab"], "bytes_per_s"))
    assert smoothed_matches(s_l0s0["ba"], m["ba"]["bytes_per_s"]), (m["ba"], raw(s_l0s0["ba"], "bytes_per_s"))
    assert {(p["source"], p["side"]) for p in s_l0s0["ab"]} == {("leaf0:Ethernet0", "tx")}
    assert {(p["source"], p["side"]) for p in s_l0s0["ba"]} == {("spine0:Ethernet0", "tx")}
    assert mean(s_l0s0["ab"], "pfc", "3") == pytest.approx(120, rel=MEAN_TOL)
    assert mean(s_l0s0["ba"], "pfc", "3") == pytest.approx(300, rel=MEAN_TOL)
    assert set(m["ab"]["pfc_pauses_per_s"]) == {"3"}  # listed priorities only
    # Counter32 ifOutDiscards at 1.4e9/s wrapped during the run: no interval lost or wrong.
    drops = raw(s_l0s0["ba"], "drops_per_s")
    assert len(drops) >= 4 and all(d == pytest.approx(WRAP_RATE, rel=INTERVAL_TOL) for d in drops), drops
    assert mean(s_l0s0["ba"], "drops_per_s") == pytest.approx(WRAP_RATE, rel=MEAN_TOL)
    assert 'c4_switch_agent_counter32_wraps_total{target="spine0"}' in metrics
    # Arista's ECN table (two queues summed): 10 % of leaf1's packets to spine0 are marked.
    ecn = links[L1S0]["measured"]["ab"]
    assert mean(s_l1s0["ab"], "ecn_marks_per_s") == pytest.approx(2e5, rel=MEAN_TOL)
    assert ecn["ecn_marked_fraction"] == pytest.approx(0.1, rel=MEAN_TOL)  # a ratio: timing cancels
    assert ecn["congested"] is True
    # Congested: leaf1 -> spine0 by its marks; both directions of leaf0--spine0 by their
    # pauses (120/s and 300/s, over the 100/s threshold). Most utilized first.
    assert [(x["link"], x["direction"], x["reason"].split()[0]) for x in congestion] == [
        (L0S0, "ab", "PFC"), (L1S0, "ab", "ECN"), (L0S0, "ba", "PFC")]
    assert [p["congested"] for p in s_l1s0["ab"]][:2] == [False, True]  # entered on its second sample
    # Mellanox over SNMPv3 authPriv: spine1 -> leaf0, with its WRED drops.
    mel = series(c, L0S1)["ba"]
    assert mean(mel, "bytes_per_s") == pytest.approx(2e9, rel=MEAN_TOL)
    assert mean(mel, "drops_per_s") == pytest.approx(800, rel=MEAN_TOL)
    # The host link: both directions from leaf0's port, host -> switch from its rx side.
    host = series(c, HOST)
    assert mean(host["ba"], "bytes_per_s") == pytest.approx(3e9, rel=MEAN_TOL)
    assert mean(host["ab"], "bytes_per_s") == pytest.approx(4e9, rel=MEAN_TOL)
    assert mean(host["ab"], "pfc", "3") == pytest.approx(50, rel=MEAN_TOL)
    assert {p["side"] for p in host["ab"]} == {"rx"} and {p["source"] for p in host["ab"]} == {"leaf0:Ethernet8"}
    assert 'c4_link_measured_utilization{direction="ab",link="leaf0:Ethernet0--spine0:Ethernet0"}' in controller_metrics
    # The dead switch is data: failing in health and metrics, the others unaffected.
    assert health["status"] == "degraded" and health["targets_failing"] == 1
    assert health["targets"]["leaf2"]["status"] == "failing" and health["targets"]["leaf2"]["error_kind"] == "timeout"
    assert all(health["targets"][n]["status"] == "ok" for n in SWITCHES)
    assert health["controller"]["reachable"] is True
    assert 'c4_switch_agent_poll_errors_total{kind="timeout",target="leaf2"}' in metrics
    assert 'c4_switch_agent_target_up{target="leaf2"} 0.0' in metrics
    for name in SWITCHES:
        assert f'c4_switch_agent_poll_duration_seconds{{target="{name}"}}' in metrics
    # Ethernet12 is not in the fabric: the controller ignored it and said so.
    assert "c4_switch_agent_ports_ignored_total" in metrics
    ignored = [line for line in metrics.splitlines() if line.startswith("c4_switch_agent_ports_ignored_total")]
    assert ignored and float(ignored[0].split()[-1]) >= 1
    assert links["leaf2:Ethernet0--spine0:Ethernet9"]["measured"]["ab"] is None


def test_wrong_v3_keys_are_an_auth_failure_not_a_crash(tmp_path: Path, snmpsim: Snmpsim) -> None:
    # One cycle, so the good target's one poll must not time out: snmpsim answers SNMPv3 in
    # Python, and at load ~8 it missed 0.5 s x 2 tries in 2 of 3 runs (no sample: the test
    # failed on the healthy target, not on what it checks). A wide deadline costs nothing here.
    cfg = agent_config(tmp_path / "agent.toml", [t for t in targets(snmpsim, 9) if t["switch"] in ("spine1", "leaf0")],
                       None, credentials=credentials(), interval_s=10.0, snmp_timeout_s=3.0)
    out = tmp_path / "samples.jsonl"
    agent = start_agent(cfg, env(priv="not-the-key"), "--output", str(out), "--cycles", "1")
    assert agent.proc.wait(30) == 0, agent.output()
    assert "poll of spine1 failed" in agent.output()
    assert "not-the-key" not in agent.output()
    [line] = out.read_text().splitlines()
    assert '"switch":"leaf0"' in line and "spine1" not in line


def test_samples_wait_in_the_spool_while_the_controller_is_away(tmp_path: Path, snmpsim: Snmpsim) -> None:
    port = free_tcp_port()
    controller = make_controller(tmp_path, port=port, start=False)
    leaf0 = [t for t in targets(snmpsim, 9) if t["switch"] == "leaf0"]
    health_port = free_tcp_port()
    cfg = agent_config(tmp_path / "agent.toml", leaf0, controller, listen_port=health_port,
                       credentials=credentials())
    agent = start_agent(cfg, env())
    try:
        def spooled() -> dict[str, Any] | None:
            try:
                h: dict[str, Any] = httpx.get(f"http://127.0.0.1:{health_port}/healthz").json()
            except httpx.HTTPError:
                return None
            return h if h["controller"].get("spooled_samples", 0) >= 3 else None

        away = wait_for(spooled, 30, "three samples spooled")
        assert away["controller"]["reachable"] is False and away["status"] == "degraded"
        started_us = time.time_ns() // 1000
        controller.start(port)
        c = controller.client()
        assert c.put("/v1/topology", json=FABRIC).status_code == 200
        points = wait_for(lambda: len(series(c, L0S0)["ab"]) >= 3 and series(c, L0S0)["ab"], 30,
                          "the spooled samples to arrive")
        healthy = httpx.get(f"http://127.0.0.1:{health_port}/healthz").json()
    finally:
        agent.stop()
        controller.stop()
    # The first samples were taken while the controller was down, seconds before it started.
    assert points[0]["t_us"] < started_us
    assert mean(points, "bytes_per_s") == pytest.approx(2.5e9, rel=MEAN_TOL)
    assert healthy["controller"]["reachable"] is True


def test_a_restarted_switch_starts_a_new_epoch_and_no_rate_spans_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    profile, ports = SWITCHES["leaf0"]
    write_switch(data, "leaf0", switch_records(profile, "leaf0", ports))
    sim = Snmpsim(data).start("leaf0")
    controller = make_controller(tmp_path)
    c = controller.client()
    assert c.put("/v1/topology", json=FABRIC).status_code == 200
    cfg = agent_config(tmp_path / "agent.toml",
                       [t | {"port": sim.port} for t in targets(sim, 9) if t["switch"] == "leaf0"],
                       controller, credentials=credentials())
    agent = start_agent(cfg, env())
    try:
        wait_for(lambda: len(series(c, L0S0)["ab"]) >= 2, 30, "two samples before the restart")
        sim.stop()
        sim.start("leaf0")  # the switch reboots: sysUpTime and every counter start over
        before = len(series(c, L0S0)["ab"])
        wait_for(lambda: len(series(c, L0S0)["ab"]) >= before + 2, 30, "two samples after the restart")
        ports_now = c.get("/v1/telemetry/switches", params={"switch": "leaf0"}).json()["ports"]
        points = series(c, L0S0)["ab"]
    finally:
        agent.stop()
        controller.stop()
        sim.stop()
    assert "restarted (sysUpTime went back)" in agent.output()
    assert {p["counter_epoch"] for p in ports_now} == {ports_now[0]["counter_epoch"]}
    assert ports_now[0]["counter_epoch"].endswith(".1")
    # Every interval's rate is the data file's: none spans the restart (the counters went back
    # to near zero; a rate across it would be negative or a wrap's 2**64).
    assert all(p["raw"]["bytes_per_s"] == pytest.approx(2.5e9, rel=INTERVAL_TOL) for p in points), \
        [p["raw"]["bytes_per_s"] for p in points]
    assert mean(points, "bytes_per_s") == pytest.approx(2.5e9, rel=MEAN_TOL)


def test_lean_and_pysnmp_decoders_read_the_same_switch_alike(snmpsim: Snmpsim) -> None:
    """The lean SNMPv2c path (the default) against pysnmp's own get_cmd/bulk_cmd, on the same
    switches of a real agent: the same ports and counters, and every pysnmp reading of a
    Counter64 lies between the lean readings taken just before and just after it (they only
    grow; the data files' Counter32s wrap every few seconds, so those are compared by name)."""
    import asyncio

    from switch_agents.poller import TargetPlan, TargetPoller
    from switch_agents.profiles import PROFILES
    from switch_agents.snmp import Credentials, PysnmpClient, Target

    def plan(name: str, pfc: tuple[int, ...] | None) -> TargetPlan:
        p = PROFILES[SWITCHES[name][0]]
        t = Target(name, "127.0.0.1", snmpsim.port, Credentials("2c", community=name), 2.0, 1, 25, 50)
        return TargetPlan(name, t, p, p.default_ports, p.default_exclude, {}, pfc)

    async def polls(name: str, pfc: tuple[int, ...] | None) -> list[dict[str, Any]]:
        lean, full = PysnmpClient("lean"), PysnmpClient("pysnmp")
        pollers = [TargetPoller(plan(name, pfc), c, "cmp") for c in (lean, full, lean)]
        try:
            out = []
            for poller in pollers:
                r = await poller.poll()
                assert r.ok, r.error
                assert r.sample is not None
                out.append(r.sample)
            return out
        finally:
            await lean.close()
            await full.close()

    def flat(sample: dict[str, Any]) -> dict[tuple[str, str], int]:
        out = {}
        for p in sample["ports"]:
            for k, v in p.items():
                if isinstance(v, int):
                    out[(p["port"], k)] = v
                elif isinstance(v, dict):
                    out.update({(p["port"], f"{k}.{prio}"): n for prio, n in v.items()})
        return out

    for name, pfc in (("leaf0", (3,)), ("leaf1", None), ("spine0", None)):
        before, middle, after = (flat(s) for s in asyncio.run(polls(name, pfc)))
        assert before.keys() == middle.keys() == after.keys() and len(before) >= 10, name
        counter32 = {"rx_discards", "tx_discards"} | ({"pfc_rx_pause.3", "pfc_tx_pause.3"} if name == "spine0" else set())
        for key, value in middle.items():
            if key[1] not in counter32:
                assert before[key] <= value <= after[key], (name, key, before[key], value, after[key])
