"""The NCCL-like workload on the testbed, through the real shim: data checked end to end,
K sockets per connection, pinned ports honoured, ring coupling measured from the shim's own
telemetry, and the fault knobs (late rank, hung rank)."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest

from testbed import Testbed
from testbed.pinning import pins_for, ring_flows
from testbed.scenarios.workloads import connection_figures
from testbed.workload import Fault, JobSpec, default_hosts, ensure_built, run_job


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    ensure_built()


def _conns(res, closed: bool = True) -> list[dict]:  # type: ignore[no-untyped-def]
    return [x["msg"] for x in res.telemetry
            if x["msg"]["type"] == "conn" and x["msg"]["dir"] == "send" and x["msg"]["closed"] == closed]


def test_ring_allreduce_is_verified_and_timed(fabric: Testbed) -> None:
    res = run_job(fabric, JobSpec(name="ring", bytes=2 << 20, iters=2, channels=2))
    assert res.ok, res.stderr
    assert res.verified()
    ready = [r for recs in res.records.values() for r in recs if r["event"] == "ready"]
    assert {(r["net_version"], r["profiler_version"]) for r in ready} == {(12, 5)}  # newest of each
    assert all(r["connections"] == 2 * 2 for r in ready)  # send + recv, per channel
    assert [i.iter for i in res.iterations] == [1, 2]
    assert all(0 < i.time_s < 10 and i.busbw_mbit > 0 for i in res.iterations)
    assert res.busbw_mbit <= 1.05 * fabric.plan.spec.rate_mbit
    assert "busbw" in res.table()


@pytest.mark.parametrize("pattern", ["alltoall", "pairs"])
def test_alltoall_and_pairs_are_verified(fabric: Testbed, pattern: str) -> None:
    res = run_job(fabric, JobSpec(name=pattern, pattern=pattern, bytes=1 << 20, iters=2, channels=2))
    assert res.ok, res.stderr
    assert res.verified()
    assert len(res.iterations) == 2


def test_k_sockets_per_connection_through_the_shim(fabric: Testbed) -> None:
    res = run_job(fabric, JobSpec(name="k3", bytes=3 << 20, iters=1, channels=1, agent=True, flows_per_conn=3))
    assert res.ok, res.stderr
    assert res.verified()
    conns = _conns(res)
    assert len(conns) == 4  # one send connection per rank
    for c in conns:
        socks = c["socks"]
        assert len(socks) == 3 and len({s["sport"] for s in socks}) == 3
        share = [s["bytes"] / c["bytes"] for s in socks]
        assert all(0.30 < x < 0.37 for x in share), share  # equal weights
    colls = [x["msg"] for x in res.telemetry if x["msg"]["type"] == "coll" and not x["msg"]["inflight"]]
    assert {c["rank"] for c in colls} == {0, 1, 2, 3}
    assert Counter(p["dir"] for c in colls for p in c["peers"]) == Counter({"send": len(colls), "recv": len(colls)})


def test_pinned_ports_are_the_sockets_ports(fabric: Testbed) -> None:
    plan = fabric.plan
    hosts = default_hosts(plan)
    flows = ring_flows(fabric, [[plan.host(h).ports[0].address] for h in hosts], channels=2, k=2)
    pins = pins_for(fabric, flows, channels=2, k=2)
    res = run_job(fabric, JobSpec(name="pinned", bytes=2 << 20, iters=1, channels=2, hosts=hosts, agent=True, pins=pins))
    assert res.ok, res.stderr
    assert res.verified()
    got = {(c["local"], c["remote"], c["conn_index"]): sorted(s["sport"] for s in c["socks"]) for c in _conns(res)}
    for key, want in pins.items():
        assert got[key] == sorted(p for p, _ in want), key


def test_one_slow_link_paces_every_ring_connection(fabric: Testbed) -> None:
    """A quarter-rate link under one connection of a ring: NCCL's bounded pipeline makes every
    connection complete at the slow pace, as the shim's per-peer figures show."""
    plan = fabric.plan
    rate = plan.spec.rate_mbit
    hosts = default_hosts(plan)
    pins = pins_for(fabric, ring_flows(fabric, [[plan.host(h).ports[0].address] for h in hosts], 1, 1), 1, 1)
    spec = JobSpec(name="coupling", bytes=4 << 20, iters=2, channels=1, hosts=hosts, agent=True, pins=pins)
    healthy = connection_figures(run_job(fabric, spec))
    slow_port = plan.host(hosts[0]).ports[0]
    link = plan.link_between(slow_port.node, slow_port.leaf)
    fabric.set_link_rate(link.name, rate // 4, direction="ab")
    try:
        res = run_job(fabric, spec)
    finally:
        fabric.set_link_rate(link.name, None)
    assert res.ok and res.verified(), res.stderr
    figs = connection_figures(res)
    sends = [f["send_mbit"] for f in figs.values()]
    recvs = [f["recv_mbit"] for f in figs.values()]
    assert len(sends) == 4 and all(x == x for x in sends + recvs)  # every connection reported
    for x in sends + recvs:
        assert 0.6 * rate / 4 <= x <= 1.1 * rate / 4, figs   # all at the throttled pace
    assert max(sends) / min(sends) < 1.3, figs
    assert statistics.median(f["send_mbit"] for f in healthy.values()) > 2 * rate / 4, healthy


def test_a_late_rank_enters_every_collective_late(fabric: Testbed) -> None:
    res = run_job(fabric, JobSpec(name="late", bytes=1 << 20, iters=2, channels=1,
                                  faults={2: Fault(late_ms=400, late_from=1)}))
    assert res.ok and res.verified(), res.stderr
    for it in (1, 2):
        starts = {r: next(x["t_start_us"] for x in recs if x["event"] == "iter" and x["iter"] == it)
                  for r, recs in res.records.items()}
        others = [t for r, t in starts.items() if r != 2]
        assert (starts[2] - max(others)) / 1e6 > 0.3, starts


def test_a_hung_rank_stops_entering_and_the_others_stall(fabric: Testbed) -> None:
    res = run_job(fabric, JobSpec(name="hang", bytes=1 << 20, iters=3, channels=1, agent=True, timeout_s=3,
                                  faults={1: Fault(hang_at=2)}))
    assert res.codes[1] == 3  # stopped entering on purpose
    # The others wait (bounded), then leave: by their own timeout (4) or, for one whose upstream
    # left first, by the remote error NCCL reports for a closed peer (6).
    assert all(res.codes[r] in (4, 6) for r in (0, 2, 3)), (res.codes, res.stderr)
    assert any(x["event"] == "hang" and x["iter"] == 2 for x in res.records[1])
    stalled = [x for r in (0, 2, 3) for x in res.records[r] if x["event"] == "timeout"]
    assert stalled and all(s["iter"] == 2 for s in stalled)
    assert [i.iter for i in res.iterations] == [1]  # iteration 2 never completed
    # The shim's watchdog re-reported the collective every other rank was stuck in.
    inflight = {x["msg"]["rank"] for x in res.telemetry
                if x["msg"]["type"] == "coll" and x["msg"]["inflight"] and x["msg"]["seq"] == 2}
    assert inflight == {0, 2, 3}, inflight


def test_dual_port_ranks_spread_channels_over_both_ports(fabric: Testbed) -> None:
    """With every NIC port in C4_SHIM_ADDR the shim has two devices; channel c goes over port
    c mod 2, as NCCL spreads channels over NICs, so both leaves of each dual-ToR host carry it."""
    plan = fabric.plan
    res = run_job(fabric, JobSpec(name="dual", port="all", bytes=2 << 20, iters=1, channels=2, agent=True))
    assert res.ok and res.verified(), res.stderr
    assert {r["devices"] for recs in res.records.values() for r in recs if r["event"] == "ready"} == {2}
    used = {c["local"] for c in _conns(res)}
    assert used == {p.address for h in plan.hosts for p in h.ports}
