"""Debian's snmpd with the shipped pass_persist extension, in a network namespace that forwards
real traffic through a real egress queue that marks ECN — polled by the real agent.

Physics: the kernel. Three namespaces, h1 -> sw -> h2 over veth pairs; sw forwards, its
egress to h2 is shaped with TBF (20 Mbit/s; the queue overflows and drops) and marks CE on
ECT packets — with RED when the kernel has sch_red, else with an nftables rule that sets CE
on what exceeds 2 MB/s (this machine's kernel has no ECN-marking qdisc: only HTB, TBF and
FIFOs). h1 sends ~3 MB/s of ECT(0) UDP for 4 s; h2 counts what arrives and how much of it
carries CE. snmpd runs inside sw; the agent polls it from inside sw every second and writes
its samples to a file, which then goes through the controller's API.

Checks: the agent's packet and mark counts against what the receiver saw (marks may exceed
the CE packets received by at most the packets the queue dropped after marking), drops from
the qdisc, and the controller's view of the sw -> h2 direction: ECN-marked fraction and
congestion. Set C4_RECORD_WALKS=1 to also rewrite tests/data/snmp/linux.json."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.settings import Settings
from controller.store.migrate import upgrade

pytestmark = [pytest.mark.netns, pytest.mark.snmp]

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "switch_agents" / "qdisc_pass_persist.py"
PREFIX = os.environ.get("C4_TEST_NETNS_PREFIX", f"c4s{os.getpid()}")
SNMP_PORT = 1161
SEND_BYTES_PER_S = 3_000_000
SEND_S = 4.0


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "tc", "snmpget"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not Path("/usr/sbin/snmpd").exists():
        return "Debian's snmpd is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"'ip netns' does not work here: {probe.stderr.strip()}"
    return None


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done


def in_ns(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", ns, *args, check=check)


class Fabric:
    """h1 -- sw -- h2, all named with this run's prefix; `close` deletes only those."""

    def __init__(self, prefix: str) -> None:
        self.h1, self.sw, self.h2 = f"{prefix}h1", f"{prefix}sw", f"{prefix}h2"
        self.marker = ""
        self.procs: list[subprocess.Popen[str]] = []

    def build(self) -> None:
        for ns in (self.h1, self.sw, self.h2):
            sh("ip", "netns", "add", ns)
            in_ns(ns, "ip", "link", "set", "lo", "up")
        sh("ip", "-n", self.sw, "link", "add", "swp1", "type", "veth", "peer", "name", "eth0", "netns", self.h1)
        sh("ip", "-n", self.sw, "link", "add", "swp2", "type", "veth", "peer", "name", "eth0", "netns", self.h2)
        for ns, dev, addr in ((self.sw, "swp1", "10.77.1.1/24"), (self.sw, "swp2", "10.77.2.1/24"),
                              (self.h1, "eth0", "10.77.1.2/24"), (self.h2, "eth0", "10.77.2.2/24")):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", self.h1, "route", "add", "default", "via", "10.77.1.1")
        sh("ip", "-n", self.h2, "route", "add", "default", "via", "10.77.2.1")
        in_ns(self.sw, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        # The egress queue toward h2: 20 Mbit/s, a 20 ms queue; marks CE where the kernel can.
        in_ns(self.sw, "tc", "qdisc", "add", "dev", "swp2", "root", "handle", "1:", "htb", "default", "1")
        in_ns(self.sw, "tc", "class", "add", "dev", "swp2", "parent", "1:", "classid", "1:1", "htb", "rate", "20mbit",
              "ceil", "20mbit")
        got = in_ns(self.sw, "tc", "qdisc", "add", "dev", "swp2", "parent", "1:1", "handle", "10:", "red", "limit",
                    "200000", "min", "15000", "max", "45000", "avpkt", "1250", "burst", "20", "probability", "1.0",
                    "bandwidth", "20mbit", "ecn", check=False)
        if got.returncode == 0:
            self.marker = "red"
            return
        if shutil.which("nft") is None:
            raise RuntimeError("the kernel has no sch_red and nftables is not installed: nothing marks ECN")
        in_ns(self.sw, "tc", "qdisc", "del", "dev", "swp2", "root")
        in_ns(self.sw, "tc", "qdisc", "add", "dev", "swp2", "root", "tbf", "rate", "20mbit", "burst", "32kb",
              "latency", "20ms")
        in_ns(self.sw, "nft", "add", "table", "inet", "c4t")
        in_ns(self.sw, "nft", "add", "chain", "inet", "c4t", "post",
              "{ type filter hook postrouting priority 0; policy accept; }")
        in_ns(self.sw, "nft", "add", "rule", "inet", "c4t", "post", "oifname", "swp2", "ip", "ecn", "ect0",
              "limit", "rate", "over", "2", "mbytes/second", "burst", "64", "kbytes", "ip", "ecn", "set", "ce",
              "counter")
        self.marker = "nftables"

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        for ns in (self.h1, self.sw, self.h2):
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[Fabric]:
    reason = _missing()
    if reason:
        print(f"SKIP snmpd-netns: {reason}")
        pytest.skip(reason)
    f = Fabric(PREFIX)
    try:
        f.build()
    except (AssertionError, RuntimeError) as exc:
        f.close()
        print(f"SKIP snmpd-netns: {exc}")
        pytest.skip(str(exc))
    yield f
    f.close()


def start_snmpd(f: Fabric, tmp: Path) -> Path:
    conf = tmp / "snmpd.conf"
    conf.write_text(f"agentAddress udp:127.0.0.1:{SNMP_PORT}\nrocommunity c4test 127.0.0.1\n"
                    f"pass_persist .1.3.6.1.4.1.8072.9999.9999.13 {sys.executable} {EXTENSION}\n")
    pid = tmp / "snmpd.pid"
    f.procs.append(subprocess.Popen(["ip", "netns", "exec", f.sw, "/usr/sbin/snmpd", "-f", "-Lo", "-C", "-c",
                                     str(conf), "-p", str(pid)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, text=True))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if in_ns(f.sw, "snmpget", "-v2c", "-c", "c4test", "-t", "0.5", "-r", "0", f"127.0.0.1:{SNMP_PORT}",
                 "1.3.6.1.2.1.1.3.0", check=False).returncode == 0:
            return pid
        time.sleep(0.2)
    raise AssertionError("snmpd did not answer inside the namespace")


def wait_samples(path: Path, done: Any, timeout_s: float, what: str) -> None:
    """Wait until the agent's sample lines written so far satisfy `done` (a line still being
    written is not read)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        lines = [json.loads(x) for x in text.split("\n")[:-1] if x]
        if done(lines):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {what} in {timeout_s} s")


def series_totals(lines: list[dict[str, Any]], port: str) -> dict[str, int]:
    """Counter growth of one port from the first sample to the last."""
    first = next(p for s in lines[0]["samples"] for p in s["ports"] if p["port"] == port)
    last = next(p for s in lines[-1]["samples"] for p in s["ports"] if p["port"] == port)
    return {k: last[k] - first[k] for k in last if isinstance(last[k], int) and k in first}


def test_snmpd_reports_real_ecn_marks_and_drops_of_a_shaped_egress(fabric: Fabric, tmp_path: Path) -> None:
    start_snmpd(fabric, tmp_path)
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'interval_s = 1\nlisten = ""\n[credentials.sw]\nversion = "2c"\ncommunity_env = "C4T_COMMUNITY"\n'
                   f'[[targets]]\nswitch = "sw"\naddress = "127.0.0.1"\nport = {SNMP_PORT}\nprofile = "linux"\n'
                   f'credentials = "sw"\nports = ["swp*"]\n')
    out = tmp_path / "samples.jsonl"
    result = tmp_path / "received.json"
    env = {**os.environ, "C4T_COMMUNITY": "c4test", "PYTHONPATH": str(ROOT)}
    agent = subprocess.Popen(["ip", "netns", "exec", fabric.sw, sys.executable, "-m", "switch_agents.cli", "run",
                              str(cfg), "--output", str(out), "--log-level", "warning"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    fabric.procs.append(agent)
    # Two quiet samples first: waited for, not slept for (under load the agent's start took
    # 3.7 s, and the load's first packets then fell before the series' first sample).
    wait_samples(out, lambda lines: len(lines) >= 2, 30, "two samples before the load")
    fabric.procs.append(subprocess.Popen(["ip", "netns", "exec", fabric.h2, sys.executable, "-m",
                                          "tests.support.udp_load", "recv", "10.77.2.2", "9000", str(SEND_S + 2),
                                          str(result)], env=env, text=True))
    time.sleep(0.3)
    sender = subprocess.run(["ip", "netns", "exec", fabric.h1, sys.executable, "-m", "tests.support.udp_load",
                             "send", "10.77.2.2", "9000", str(SEND_BYTES_PER_S), str(SEND_S)],
                            capture_output=True, text=True, env=env, timeout=30, check=True)
    sent = int(sender.stdout.strip())
    # net-snmp refreshes IF-MIB counters every few seconds (~3 s seen): samples taken from 5 s
    # after the load's end on, by the agent's own clock, read the final counts; wait for two.
    ended_us = time.time_ns() // 1000
    wait_samples(out, lambda lines: sum(ln["samples"][0]["t_us"] >= ended_us + 5_000_000 for ln in lines) >= 2,
                 40, "two samples 5 s after the load")
    agent.send_signal(signal.SIGTERM)
    log, _ = agent.communicate(timeout=60)
    assert agent.returncode == 0, log
    received = json.loads(result.read_text())
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) >= 8, log
    print(f"marker {fabric.marker}: sent {sent}, received {received}")

    swp2 = series_totals(lines, "swp2")  # sw's egress toward h2
    print(f"agent saw on swp2: {swp2}")
    assert swp2["tx_pkts"] == pytest.approx(received["packets"], abs=10)
    assert received["ce"] > 0.05 * received["packets"]
    dropped = swp2["queue_drops"]
    # The shaped egress dropped what reached the switch and did not leave it. Compared with what
    # entered on swp1, not with what h1 sent: on a CPU-starved machine the kernel also drops
    # packets before the switch (the veth's backlog queue), which the egress never sees.
    arrived = series_totals(lines, "swp1")["rx_pkts"]
    assert arrived <= sent + 10
    assert dropped == pytest.approx(arrived - swp2["tx_pkts"], abs=10)
    assert dropped > 0
    assert received["ce"] <= swp2["ecn_marked_pkts"] <= received["ce"] + dropped

    if os.environ.get("C4_RECORD_WALKS"):
        record_linux(fabric, tmp_path, cfg, env)

    # The same samples through the controller: sw's swp2 is the host link to h2.
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    doc = {"name": "netns", "switches": [{"name": "sw", "role": "leaf"}], "links": [], "hosts": [
        {"name": "h1", "nics": [{"name": "eth0", "ports": [{"name": "p0", "address": "10.77.1.2", "switch": "sw",
                                                            "switch_port": "swp1", "capacity_gbps": 0.02}]}]},
        {"name": "h2", "nics": [{"name": "eth0", "ports": [{"name": "p0", "address": "10.77.2.2", "switch": "sw",
                                                            "switch_port": "swp2", "capacity_gbps": 0.02}]}]}]}
    # A 20 Mbit/s link (2000 packets/s) loaded for 4 s: the defaults (tau 15 s, at least
    # 1000 packets/s smoothed) are sized for 100G ports polled every 10 s, so scale them down.
    settings = Settings(database_url=url, admin_token="t", data_dir=tmp_path, link_sample_fresh_s=600,
                        congestion_ewma_tau_s=2.0, congestion_min_pkts_per_s=100)
    with TestClient(create_app(settings, start_workers=False), headers={"Authorization": "Bearer t"}) as c:
        assert c.put("/v1/topology", json=doc).status_code == 200
        for line in lines:
            assert c.post("/v1/telemetry/switches", json=line, params={"unknown": "ignore"}).status_code == 202
        link = "h2:eth0:p0--sw:swp2"
        points = c.get(f"/v1/links/{link}/series", params={"window_s": 600}).json()["ba"]  # sw -> h2
        congested = [p["congested"] for p in points]
        ecn = sum(p["raw"]["ecn_marks_per_s"] * p["interval_s"] for p in points)
    assert ecn == pytest.approx(swp2["ecn_marked_pkts"], rel=0.01)
    assert True in congested, [(p["raw"]["pkts_per_s"], p["raw"]["ecn_marks_per_s"], p["pkts_per_s"],
                                p["ecn_marked_fraction"]) for p in points]
    print(f"marks {swp2['ecn_marked_pkts']}, drops {dropped}, congested {congested}")
    assert congested[0] is False  # quiet before the load


def record_linux(fabric: Fabric, tmp: Path, cfg: Path, env: dict[str, str]) -> None:
    """Rewrite tests/data/snmp/linux.json from this snmpd (C4_RECORD_WALKS=1)."""
    target = ROOT / "tests" / "data" / "snmp" / "linux.json"
    done = subprocess.run(["ip", "netns", "exec", fabric.sw, sys.executable, "-m", "switch_agents.cli", "record",
                           str(cfg), "--target", "sw", "--polls", "2", "--interval-s", "1", "--out", str(target)],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
