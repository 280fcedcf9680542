"""The fabric itself: built as planned, documented as built, reachable, hashed by the kernel
on the 5-tuple, shaped, marking ECN, watched by snmpd, and torn down without leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient

from testbed import FabricSpec, Testbed, kernel
from testbed.commands import NFT_TABLE
from testbed.traffic import reach_all, spines_by_sport, tcp_flow

ROOT = Path(__file__).resolve().parents[2]


def _addresses(tb: Testbed, node: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for iface in kernel.addrs_json(tb.netns(node)):
        out[iface["ifname"]] = {f"{a['local']}/{a['prefixlen']}" for a in iface.get("addr_info", [])}
    return out


def test_document_is_what_the_kernel_has(fabric: Testbed) -> None:
    doc, plan = fabric.doc(), fabric.plan
    assert fabric.status()["problems"] == []
    # Host ports: the address is on the interface named like the port, in the host's namespace.
    for host in doc["hosts"]:
        addrs = _addresses(fabric, host["name"])
        for port in host["nics"][0]["ports"]:
            assert f"{port['address']}/32" in addrs[port["name"]], (host["name"], port)
    # Switch links: both ends carry their addresses; each end's veth peer is the other end.
    for link in doc["links"]:
        for side in "ab":
            assert f"{link[side + '_address']}/31" in _addresses(fabric, link[side])[link[side + "_port"]]
        a_links = {x["ifname"]: x for x in kernel.links_json(fabric.netns(link["a"]))}
        b_links = {x["ifname"]: x for x in kernel.links_json(fabric.netns(link["b"]))}
        assert a_links[link["a_port"]]["link_index"] == b_links[link["b_port"]]["ifindex"]
        assert b_links[link["b_port"]]["link_index"] == a_links[link["a_port"]]["ifindex"]
    # Capacities: the HTB rate on both ends of every link, host links included.
    for link in plan.links:
        for end in (link.a, link.b):
            assert kernel.htb_rate_mbit(fabric.netns(end.node), end.ifname) == link.rate_mbit
        assert link.rate_mbit / 1000 in {x["capacity_gbps"] for x in doc["links"]} | {
            p["capacity_gbps"] for h in doc["hosts"] for p in h["nics"][0]["ports"]}
    # Seeds and hashing: the sysctls the document reports.
    for sw in doc["switches"]:
        out = fabric.exec(sw["name"], ["sysctl", "-n", "net.ipv4.fib_multipath_hash_seed",
                                       "net.ipv4.fib_multipath_hash_policy",
                                       "net.ipv4.fib_multipath_hash_fields"]).stdout.split()
        assert out == [str(sw["ecmp_seed"]), "3", "55"]  # 5-tuple from the headers (0x37)


def test_document_is_accepted_by_put_topology(fabric: Testbed, tmp_path: Path) -> None:
    from controller.api.app import create_app
    from controller.services.runtime import Runtime
    from controller.settings import Settings
    from controller.store.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    rt = Runtime.from_settings(Settings(database_url=url, data_dir=tmp_path, admin_token="t"))
    with TestClient(create_app(runtime=rt), headers={"Authorization": "Bearer t"}) as client:
        doc = fabric.doc()
        r = client.put("/v1/topology", json=doc)
        assert r.status_code == 200, r.text
        got = client.get("/v1/topology").json()
    rt.engine.dispose()
    assert {s["name"] for s in got["switches"]} == {s["name"] for s in doc["switches"]}
    assert {x["name"] for x in got["links"]} == {x["name"] for x in doc["links"]}
    assert got["hashing"] == doc["hashing"]


def test_every_host_pair_is_reachable_on_every_port(fabric: Testbed) -> None:
    result = reach_all(fabric)
    addresses = [p.address for h in fabric.plan.hosts for p in h.ports]
    assert set(result) == set(addresses)
    missing = [(s, d) for s, row in result.items() for d, rtt in row.items() if rtt is None]
    assert missing == [], missing
    assert sum(len(row) for row in result.values()) == len(addresses) * (len(addresses) - 1)


def test_ecmp_spreads_flows_across_spines_by_source_port(fabric: Testbed) -> None:
    plan = fabric.plan
    src = plan.host("host0").ports[0]   # on leaf0
    dst = plan.host("host2").ports[0]   # on leaf1
    sports = list(range(50000, 50032))
    seen = spines_by_sport(fabric, src.address, dst.address, sports, dport=5201)
    assert set(seen.values()) == {"spine0", "spine1"}, seen           # the hash spreads
    assert spines_by_sport(fabric, src.address, dst.address, sports, dport=5201) == seen  # deterministically
    # Real traffic follows the probed hash: each flow's bytes leave leaf0 on that spine's uplink.
    for spine in ("spine0", "spine1"):
        sport = next(s for s, sp in seen.items() if sp == spine)
        uplinks = {s.name: plan.link_between("leaf0", s.name).a.ifname for s in plan.spines}
        before = fabric.counters("leaf0")
        res = tcp_flow(fabric, src.address, dst.address, sport=sport, port=5201, nbytes=3_000_000, seconds=10)
        after = fabric.counters("leaf0")
        moved = {sp: after[i]["tx_bytes"] - before[i]["tx_bytes"] for sp, i in uplinks.items()}
        assert res["bytes"] == 3_000_000
        assert moved[spine] >= 3_000_000, (spine, moved)
        other = next(sp for sp in uplinks if sp != spine)
        assert moved[other] < 300_000, (spine, moved)


def test_a_shaped_link_caps_throughput(fabric: Testbed) -> None:
    plan = fabric.plan
    src, dst = plan.host("host0").ports[0], plan.host("host3").ports[0]
    rate = plan.spec.rate_mbit
    full = tcp_flow(fabric, src.address, dst.address, sport=50100, seconds=2.0)
    assert 0.85 * rate <= full["mbit_s"] <= 1.02 * rate, full
    link = plan.link_between(src.node, src.leaf)
    fabric.set_link_rate(link.name, rate // 4)
    try:
        slow = tcp_flow(fabric, src.address, dst.address, sport=50101, seconds=2.0)
        assert 0.85 * rate / 4 <= slow["mbit_s"] <= 1.02 * rate / 4, slow
        assert fabric.status()["overrides"]
    finally:
        fabric.set_link_rate(link.name, None)
    assert fabric.status()["problems"] == []


def test_congested_switch_port_marks_ecn(fabric: Testbed) -> None:
    """Two hosts on leaf0 send to leaf1 through the same spine: that uplink's queue builds and
    its packets get CE, counted by the switch; the idle uplink marks nothing."""
    plan = fabric.plan
    a, b = plan.host("host0").ports[0], plan.host("host1").ports[0]   # both on leaf0
    c, d = plan.host("host2").ports[0], plan.host("host3").ports[0]   # both on leaf1
    sa = spines_by_sport(fabric, a.address, c.address, list(range(51000, 51032)), dport=5301)
    sb = spines_by_sport(fabric, b.address, d.address, list(range(51000, 51032)), dport=5301)
    pa = next(p for p, s in sa.items() if s == "spine0")
    pb = next(p for p, s in sb.items() if s == "spine0")
    up0 = plan.link_between("leaf0", "spine0").a.ifname
    up1 = plan.link_between("leaf0", "spine1").a.ifname
    before = fabric.ecn_marks("leaf0")
    flows = [fabric.popen(x.host, [sys.executable, "-m", "testbed.tcpflow", "sink", "--bind", y.address,
                                   "--port", "5301", "--timeout-s", "20"], stdout=subprocess.PIPE, text=True)
             for x, y in ((c, c), (d, d))]
    try:
        for f in flows:
            assert f.stdout is not None and f.stdout.readline().strip() == "listening"
        senders = [fabric.popen(x.host, [sys.executable, "-m", "testbed.tcpflow", "send", "--src", x.address,
                                         "--sport", str(p), "--dst", y.address, "--port", "5301", "--seconds", "2"],
                                stdout=subprocess.PIPE, text=True)
                   for x, p, y in ((a, pa, c), (b, pb, d))]
        for s in senders:
            s.communicate(timeout=30)
        results = [json.loads(f.communicate(timeout=30)[0]) for f in flows]
    finally:
        for f in flows:
            if f.poll() is None:
                f.kill()
    after = fabric.ecn_marks("leaf0")
    assert after[up0] - before.get(up0, 0) > 0, (before, after)
    assert after[up1] - before.get(up1, 0) == 0, (before, after)
    # The two flows shared one uplink at the link rate.
    total = sum(r["mbit_s"] for r in results)
    assert total <= 1.05 * plan.spec.rate_mbit, results
    assert NFT_TABLE


def test_snmpd_answers_if_mib_for_the_switch_ports(fabric: Testbed) -> None:
    plan = fabric.plan
    for sw in plan.switches:
        out = subprocess.run(["snmpbulkwalk", "-v2c", "-c", "public", "-On", "-M", "/dev/null", "-m", "", "-t", "2",
                              sw.mgmt_address, "1.3.6.1.2.1.31.1.1.1.1"],  # ifName
                             capture_output=True, text=True, check=True, timeout=20).stdout
        names = {line.split('"')[1] for line in out.splitlines() if '"' in line}
        ports = {end.ifname for link in plan.links for end in (link.a, link.b) if end.node == sw.name}
        assert ports <= names, (sw.name, ports - names)
        descr = subprocess.run(["snmpget", "-v2c", "-c", "public", "-Oqv", "-M", "/dev/null", "-m", "",
                                sw.mgmt_address, "1.3.6.1.2.1.1.5.0"],
                               capture_output=True, text=True, check=True, timeout=20).stdout
        assert sw.name in descr


def test_link_down_reroutes_and_link_up_restores(fabric: Testbed) -> None:
    plan = fabric.plan
    link = plan.link_between("leaf0", "spine1")
    src, dst = plan.host("host0").ports[0], plan.host("host2").ports[0]
    fabric.set_link_state(link.name, up=False)
    try:
        seen = spines_by_sport(fabric, src.address, dst.address, list(range(52000, 52016)))
        assert set(seen.values()) == {"spine0"}, seen
        assert all(rtt is not None for row in reach_all(fabric).values() for rtt in row.values())
    finally:
        fabric.set_link_state(link.name, up=True)
    seen = spines_by_sport(fabric, src.address, dst.address, list(range(52000, 52016)))
    assert set(seen.values()) == {"spine0", "spine1"}, seen
    assert fabric.status()["problems"] == []


def test_two_testbeds_coexist_and_down_touches_only_its_own(fabric: Testbed) -> None:
    other = Testbed(f"e2x{os.getpid() % 10_000_000}")
    other.up(FabricSpec(leaves=1, spines=1, hosts_per_leaf=2, rate_mbit=50))
    try:
        assert other.plan.mgmt_net != fabric.plan.mgmt_net
        assert all(r is not None for row in reach_all(other).values() for r in row.values())
    finally:
        report = other.down()
    assert report.namespaces and all(n.startswith(other.prefix + "-") for n in report.namespaces)
    assert kernel.namespaces(other.prefix) == []
    assert fabric.status()["problems"] == []


def test_down_after_a_killed_run_leaves_nothing() -> None:
    """A process that brought a testbed up and is running the workload on it is SIGKILLed
    mid-run; `c4-testbed down` then removes every namespace, the root link, the processes
    (ranks, static agent, snmpd) and the files."""
    prefix = f"e2k{os.getpid() % 10_000_000}"
    script = (
        "import threading, time\n"
        "from pathlib import Path\n"
        "from testbed import FabricSpec, Testbed, kernel\n"
        "from testbed.workload import JobSpec, run_job\n"
        f"tb = Testbed({prefix!r}); tb.up(FabricSpec(leaves=2, spines=1, hosts_per_leaf=1, rate_mbit=20))\n"
        "job = JobSpec(name='long', bytes=8 << 20, iters=1000, channels=1, agent=True, timeout_s=60)\n"
        "threading.Thread(target=run_job, args=(tb, job), daemon=True).start()\n"
        "hosts = [tb.netns(h.name) for h in tb.plan.hosts]\n"
        "def ranks():\n"
        "    pids = kernel.pids_in(hosts)\n"
        "    return [p for ps in pids.values() for p in ps if Path(f'/proc/{p}/comm').read_text().strip() == 'c4-workload']\n"
        "while len(ranks()) < 2: time.sleep(0.1)\n"
        "time.sleep(1.0)\n"
        "print('ready', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        names = kernel.namespaces(prefix)
        inside = [p for pids in kernel.pids_in(names).values() for p in pids]
        comms = sorted(Path(f"/proc/{p}/comm").read_text().strip() for p in inside)
        assert comms.count("c4-workload") == 2 and "snmpd" in comms, comms
        assert any(c.startswith("python") for c in comms), comms  # the static agent, in <prefix>-mgmt
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "down", "--prefix", prefix],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    time.sleep(0.2)
    assert kernel.namespaces(prefix) == []
    assert not kernel.link_exists(f"{prefix}-mg")
    assert not any(os.path.exists(f"/proc/{p}") and _state(p) not in ("Z", "X") for p in inside)
    assert not Testbed(prefix).is_up()
    assert not (Path(os.environ.get("C4_TESTBED_RUN_DIR", "/run/c4-testbed")) / prefix).exists()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return "X"


def test_snmpd_extension_hook_runs_inside_the_switch(fabric: Testbed) -> None:
    """Extra snmpd.conf lines (the hook a switch agent's pass_persist extension uses) run in
    the switch's own namespace: an `extend` reading a per-namespace sysctl returns that switch's
    ECMP seed."""
    hook_oid = ".1.3.6.1.4.1.8072.1.3.2.3.1.1.4.104.111.111.107"  # nsExtendOutput1Line."hook"
    fabric.configure_snmpd([lambda plan, sw: ["extend hook /bin/cat /proc/sys/net/ipv4/fib_multipath_hash_seed"]])
    try:
        for sw in fabric.doc()["switches"]:
            out = subprocess.run(["snmpget", "-v2c", "-c", "public", "-Oqv", "-M", "/dev/null", "-m", "",
                                  sw["mgmt_address"], hook_oid], capture_output=True, text=True, check=True,
                                 timeout=20).stdout
            assert out.strip().strip('"') == str(sw["ecmp_seed"])
    finally:
        fabric.configure_snmpd([])
    assert all(fabric.status()["snmpd"].values())
