"""Pure parts of the workload side: bus bandwidth arithmetic, rank placement, the equitable
spine colouring used for hand-pinned ports, and the static agent's answers (over real Unix
sockets in a temporary directory; no root needed)."""

from __future__ import annotations

import itertools
import random
import socket
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from node_agent import shim_protocol as sp
from testbed.agent import StaticAgent
from testbed.pinning import FlowKey, assign_spines, ring_flows, uplink_load
from testbed.plan import FabricSpec, make_plan
from testbed.workload import bus_factor, default_hosts, iteration_stats


def _tb(**kw):  # type: ignore[no-untyped-def]
    return SimpleNamespace(plan=make_plan(FabricSpec(**kw), "c4tb", "198.18.0.0/20"))


def test_bus_factors_are_nccl_tests() -> None:
    assert bus_factor("ring", 16) == pytest.approx(2 * 15 / 16)
    assert bus_factor("alltoall", 4) == pytest.approx(3 / 4)
    assert bus_factor("pairs", 8) == 1.0
    assert bus_factor("ring", 1) == 1.0


def test_iteration_time_runs_from_first_entry_to_last_exit() -> None:
    records = {
        0: [{"event": "iter", "iter": 0, "warmup": True, "t_start_us": 0, "t_end_us": 5},
            {"event": "iter", "iter": 1, "warmup": False, "t_start_us": 1_000_000, "t_end_us": 2_000_000}],
        1: [{"event": "iter", "iter": 1, "warmup": False, "t_start_us": 1_200_000, "t_end_us": 2_500_000}],
    }
    (it,) = iteration_stats(records, "ring", 1_000_000)
    assert it.iter == 1 and it.time_s == pytest.approx(1.5)
    assert it.algbw_mbit == pytest.approx(8 / 1.5)
    assert it.busbw_mbit == pytest.approx(8 / 1.5 * 1.0)  # 2(n-1)/n with n = 2


def test_default_placement_puts_ring_neighbours_on_different_leaves() -> None:
    tb = _tb(leaves=4, spines=4, hosts_per_leaf=4)
    hosts = default_hosts(tb.plan)
    assert hosts[:5] == ["host0", "host4", "host8", "host12", "host1"]
    leaf = {h.name: h.home_leaf for h in tb.plan.hosts}
    assert all(leaf[a] != leaf[b] for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True))


@pytest.mark.parametrize(("leaves", "spines", "hosts", "channels", "k"), [
    (4, 4, 4, 1, 1), (4, 4, 4, 2, 1), (4, 4, 4, 1, 2), (8, 4, 2, 2, 1), (3, 2, 3, 1, 1), (2, 3, 2, 1, 1)])
def test_spine_colouring_is_equitable(leaves: int, spines: int, hosts: int, channels: int, k: int) -> None:
    tb = _tb(leaves=leaves, spines=spines, hosts_per_leaf=hosts)
    addrs = [[tb.plan.host(h).ports[0].address] for h in default_hosts(tb.plan)]
    flows = ring_flows(tb, addrs, channels, k)  # type: ignore[arg-type]
    colour = assign_spines(tb, flows)  # type: ignore[arg-type]
    assert set(colour) == set(flows)
    per_leaf_out = Counter(tb.plan.port_by_address(f.src).leaf for f in flows)
    bound = max(-(-n // spines) for n in per_leaf_out.values())
    assert uplink_load(tb, flows, colour) <= bound  # type: ignore[arg-type]


def test_spine_colouring_on_random_flows() -> None:
    rng = random.Random(7)
    tb = _tb(leaves=5, spines=3, hosts_per_leaf=3)
    ports = [p.address for h in tb.plan.hosts for p in h.ports]
    flows = []
    for i in range(40):
        a, b = rng.sample(ports, 2)
        if tb.plan.port_by_address(a).leaf != tb.plan.port_by_address(b).leaf:
            flows.append(FlowKey(a, b, i, 0))
    colour = assign_spines(tb, flows)  # type: ignore[arg-type]
    deg = Counter()
    for f in flows:
        deg[tb.plan.port_by_address(f.src).leaf] += 1
        deg[tb.plan.port_by_address(f.dst).leaf] += 1
    assert uplink_load(tb, flows, colour) <= -(-max(deg.values()) // 3)  # type: ignore[arg-type]


def _lookup(local: str, remote: str, idx: int, req_id: int = 9) -> sp.Lookup:
    return sp.Lookup(req_id=req_id, pid=1, comm_id=5, local=local, remote=remote, remote_port=4792, conn_index=idx)


def test_static_agent_answers_from_its_table_and_records_telemetry(tmp_path: Path) -> None:
    sock, rec = tmp_path / "h0.sock", tmp_path / "t.jsonl"
    agent = StaticAgent({"sockets": {"host0": str(sock)}, "record": str(rec), "default_flows": 2,
                         "table": [{"local": "10.1.0.2", "remote": "10.2.0.2", "conn_index": 1,
                                    "flows": [[50001, 600000], [50002, 400000]]}]})
    client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    client.bind(str(tmp_path / "shim.sock"))
    answers = []
    for msg in (_lookup("10.1.0.2", "10.2.0.2", 1), _lookup("10.1.0.2", "10.2.0.2", 0)):
        agent.handle("host0", sp.encode(msg), str(tmp_path / "shim.sock"))
        answers.append(sp.decode(client.recv(4096)))
    pinned, default = answers
    assert isinstance(pinned, sp.Assign) and pinned.req_id == 9 and pinned.conn_index == 1
    assert [(f.sport, f.weight_ppm) for f in pinned.flows] == [(50001, 600000), (50002, 400000)]
    assert isinstance(default, sp.Assign) and [f.sport for f in default.flows] == [0, 0]
    assert sum(f.weight_ppm for f in default.flows) == 1_000_000
    stats = sp.Stats(pid=1, ring_drops=0, send_drops=0, lookups=2, lookup_timeouts=0, lookup_failures=0,
                     bind_fallbacks=0, records_sent=3)
    agent.handle("host0", sp.encode(stats), None)
    agent.handle("host0", b"garbage", None)
    agent.record.close()  # type: ignore[union-attr]
    lines = rec.read_text().splitlines()
    assert len(lines) == 1 and '"stats"' in lines[0] and '"host": "host0"' in lines[0]
    assert agent.malformed == 1 and agent.lookups == 2
    client.close()
    for s in itertools.chain(agent.sockets.values()):
        s.close()
