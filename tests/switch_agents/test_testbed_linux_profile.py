"""The agent's `linux` profile on the testbed (testbed/): every switch namespace runs Debian's
snmpd with the pass_persist extension, the testbed's nftables markers set CE when an egress
queue builds, and the agent polls over the management network from the root namespace.

Physics: the kernel — two TCP flows (Linux's own congestion control, ECN on) from two hosts
of leaf0 to two hosts of leaf1 pinned by source port to the same spine, so leaf0's uplink to
it queues and marks while the other uplink stays idle. The marks the agent reports must be
the testbed's own nft counters; through the controller, that uplink direction shows ECN and
the idle one none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.settings import Settings
from controller.store.migrate import upgrade

pytestmark = [pytest.mark.netns, pytest.mark.snmp]

TOOLS = ("ip", "tc", "nft", "snmpd")


@pytest.fixture(scope="module")
def testbed() -> Iterator[object]:
    import shutil

    if os.geteuid() != 0 or any(shutil.which(t) is None for t in TOOLS):
        reason = "needs root and " + ", ".join(TOOLS)
        print(f"SKIP testbed linux profile: {reason}")
        pytest.skip(reason)
    from testbed import FabricSpec, Testbed

    tb = Testbed(f"sa{os.getpid() % 10_000_000}")
    tb.up(FabricSpec(leaves=2, spines=2, hosts_per_leaf=2, dual_tor=False, rate_mbit=100, seed=7))
    try:
        yield tb
    finally:
        tb.down()


def test_the_agent_reads_the_testbeds_ecn_marks_through_snmpd(testbed: object, tmp_path: Path) -> None:
    from testbed import Testbed
    from testbed.traffic import spines_by_sport

    tb = testbed
    assert isinstance(tb, Testbed)
    plan = tb.plan
    leaf0 = next(s for s in plan.switches if s.name == "leaf0")
    a, b = plan.host("host0").ports[0], plan.host("host1").ports[0]  # on leaf0
    c, d = plan.host("host2").ports[0], plan.host("host3").ports[0]  # on leaf1
    pa = next(p for p, s in spines_by_sport(tb, a.address, c.address, list(range(51000, 51032)), 5302).items()
              if s == "spine0")
    pb = next(p for p, s in spines_by_sport(tb, b.address, d.address, list(range(51000, 51032)), 5302).items()
              if s == "spine0")
    hot = plan.link_between("leaf0", "spine0")
    idle = plan.link_between("leaf0", "spine1")
    up_hot = hot.a.ifname if hot.a.node == "leaf0" else hot.b.ifname
    up_idle = idle.a.ifname if idle.a.node == "leaf0" else idle.b.ifname

    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'interval_s = 1\nlisten = ""\n[credentials.tb]\nversion = "2c"\ncommunity_env = "C4T_COMMUNITY"\n'
                   f'[[targets]]\nswitch = "leaf0"\naddress = "{leaf0.mgmt_address}"\nprofile = "linux"\n'
                   f'credentials = "tb"\n')
    out = tmp_path / "samples.jsonl"
    agent = subprocess.Popen([sys.executable, "-m", "switch_agents.cli", "run", str(cfg), "--output", str(out),
                              "--cycles", "8", "--log-level", "warning"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env={**os.environ, "C4T_COMMUNITY": "public"})
    sinks = [tb.popen(y.host, [sys.executable, "-m", "testbed.tcpflow", "sink", "--bind", y.address, "--port", "5302",
                               "--timeout-s", "20"], stdout=subprocess.PIPE, text=True) for y in (c, d)]
    try:
        for s in sinks:
            assert s.stdout is not None and s.stdout.readline().strip() == "listening"
        senders = [tb.popen(x.host, [sys.executable, "-m", "testbed.tcpflow", "send", "--src", x.address, "--sport",
                                     str(p), "--dst", y.address, "--port", "5302", "--seconds", "3"],
                            stdout=subprocess.PIPE, text=True) for x, p, y in ((a, pa, c), (b, pb, d))]
        for s in senders:
            s.communicate(timeout=30)
        log, _ = agent.communicate(timeout=60)
    finally:
        for p in (*sinks, agent):
            if p.poll() is None:
                p.kill()
    assert agent.returncode == 0, log
    marks = tb.ecn_marks("leaf0")
    drops = tb.queue_drops("leaf0")
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    ports = {p["port"]: p for p in lines[-1]["samples"][0]["ports"]}
    assert marks[up_hot] > 0 and marks.get(up_idle, 0) == 0, marks
    # The agent's last sample came after the flows ended: its counts are the kernel's.
    assert ports[up_hot]["ecn_marked_pkts"] == marks[up_hot]
    assert ports[up_idle]["ecn_marked_pkts"] == 0
    assert ports[up_hot]["queue_drops"] == drops.get(up_hot, 0)

    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    settings = Settings(database_url=url, admin_token="t", data_dir=tmp_path, link_sample_fresh_s=600,
                        congestion_ewma_tau_s=2.0, congestion_min_pkts_per_s=100)
    with TestClient(create_app(settings, start_workers=False), headers={"Authorization": "Bearer t"}) as client:
        assert client.put("/v1/topology", json=tb.doc()).status_code == 200
        for line in lines:
            r = client.post("/v1/telemetry/switches", json=line, params={"unknown": "ignore"})
            assert r.status_code == 202, r.text
        links = {x["name"]: x for x in client.get("/v1/links").json()["links"]}
        series = {}
        for link, port in ((hot, up_hot), (idle, up_idle)):
            direction = "ab" if links[link.name]["a"] == "leaf0" else "ba"  # leaving leaf0
            series[port] = client.get(f"/v1/links/{link.name}/series", params={"window_s": 600}).json()[direction]
    first = {p["port"]: p for p in lines[0]["samples"][0]["ports"]}
    hot_marks = sum(p["raw"]["ecn_marks_per_s"] * p["interval_s"] for p in series[up_hot])
    assert hot_marks == pytest.approx(marks[up_hot] - first[up_hot]["ecn_marked_pkts"], rel=1e-6)
    assert {p["source"] for p in series[up_hot]} == {f"leaf0:{up_hot}"}
    assert all(p["raw"]["ecn_marks_per_s"] == 0 for p in series[up_idle])
