"""The simulator's physics, checked against how NCCL and RDMA behave (docs/research), not
against what the detectors need: rings couple their connections through bounded slots,
uncoupled patterns do not, RDMA senders never run ahead of their receivers while socket
senders do, `t_first` is this rank's own proxy start, and time on the network tells the
connection held back by its own path from the ones waiting for it."""

from __future__ import annotations

import numpy as np
import pytest

from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simphysics import (
    INF,
    Physics,
    Transfer,
    chunk_sizes,
    ring_sizes,
    side_at,
    simulate_transfer,
)
from controller.diagnosis.simulator import SimConfig, simulate

RATE = 10_000.0  # bytes/us per flow


def _ring(k: int, physics: Physics, factor: dict[int, float], dead: dict[int, float] | None = None,
          start: np.ndarray | None = None, nbytes: int = 32 << 20) -> Transfer:
    """One ring of k ranks (connection p: rank p -> p + 1), one channel, one flow each."""
    pos = np.arange(k)
    starts = np.zeros(k) if start is None else start
    f = np.array([[factor.get(p, 1.0)] for p in range(k)])
    d = np.array([[(dead or {}).get(p, INF)] for p in range(k)])
    return simulate_transfer(physics, ring_sizes(nbytes, k, physics.chunk_bytes, 2 * (k - 1), k),
                             starts, np.roll(starts, -1), np.full((k, 1), RATE), f,
                             np.zeros((k, 1)), np.full((k, 1), INF), d,
                             ((pos - 1) % k, (pos + 1) % k, 2 * (k - 1)))


def _rates(tr: Transfer, k: int, start: np.ndarray | None = None) -> tuple[list[float], list[float]]:
    """Per connection: bytes over (last completion - proxy start), bytes over net_us."""
    starts = np.zeros(k) if start is None else start
    wall, net = [], []
    for p in range(k):
        side = side_at(tr, [p], [0], True, INF)
        assert side.t_last is not None
        wall.append(side.bytes / (side.t_last - starts[p]))
        net.append(side.bytes / side.net_us)
    return wall, net


@pytest.mark.parametrize("physics", [Physics(), Physics(slots=8, chunk_bytes=1 << 19),
                                     Physics(slots=2, chunk_bytes=4 << 20),
                                     Physics(completion="socket")],
                         ids=["rdma-4x1MiB", "rdma-8x512KiB", "rdma-2x4MiB", "socket"])
def test_one_slow_connection_paces_its_whole_ring_but_only_it_stays_on_the_network(
        physics: Physics) -> None:
    k, slow, factor = 8, 3, 0.25
    wall, net = _rates(_ring(k, physics, {slow: factor}, nbytes=256 << 20), k)
    # coupled: the span rate is about the same everywhere (filling and draining the pipeline
    # apart), and it is the slow connection's pace
    assert max(wall) / min(wall) < 1.15
    assert max(wall) < 1.15 * factor * RATE
    healthy = [r for p, r in enumerate(net) if p != slow]
    assert net[slow] == pytest.approx(factor * RATE, rel=0.10)
    if physics.completion == "rdma":  # on the wire for its own chunks only
        assert min(healthy) > 0.8 * RATE
    else:  # a socket write completes into the buffer: the copy's pace
        assert min(healthy) == pytest.approx(physics.copy_rate_bytes_per_us, rel=0.05)


def test_uncoupled_connections_keep_their_own_pace() -> None:
    """Alltoall and pairs: a receiver consumes on arrival, nothing is forwarded, so a slow
    connection delays nobody else."""
    n = 6
    sizes = chunk_sizes([16 << 20] * n, 1 << 20)
    f = np.ones((n, 1))
    f[2] = 0.25
    tr = simulate_transfer(Physics(), sizes, np.zeros(n), np.zeros(n), np.full((n, 1), RATE), f,
                           np.zeros((n, 1)), np.full((n, 1), INF), np.full((n, 1), INF))
    ends = tr.send_end()
    nominal = (16 << 20) / RATE
    assert ends[2] == pytest.approx(nominal / 0.25, rel=0.1)
    assert all(ends[c] < 1.2 * nominal for c in range(n) if c != 2)


@pytest.mark.parametrize("slots", [2, 4, 8])
def test_a_sender_never_has_more_chunks_out_than_slots(slots: int) -> None:
    k = 6
    tr = _ring(k, Physics(slots=slots), {2: 0.2})
    for j in range(slots, tr.post.shape[0]):
        # chunk j may go only into the slot chunk j - slots freed, after that one arrived
        assert (tr.recv_post[j] >= tr.arrive[j - slots]).all()
        assert (tr.post[j] >= tr.recv_post[j]).all()


@pytest.mark.parametrize("buffer_mib", [1, 4])
def test_rdma_senders_complete_only_what_arrived_socket_senders_run_ahead(buffer_mib: int) -> None:
    """A dead flow: RDMA sends never complete beyond what arrived, and stay posted (on the
    network) from the death on. Socket writes complete into the buffer: the sender is ahead
    by what the buffer holds; if it holds less than the slots' chunks, the next write waits
    (on the network) too, else the sender only waits for slots (not on the network)."""
    k, dead_at = 6, 2_000.0
    late = dead_at + 50_000
    rdma = _ring(k, Physics(), {}, dead={2: dead_at})
    assert (rdma.complete >= rdma.arrive).all()  # a send completes after its arrival (ack)
    sent, got = side_at(rdma, [2], [0], True, late), side_at(rdma, [2], [0], False, late)
    assert not sent.done and not got.done and sent.bytes == got.bytes
    assert sent.net_us > late - dead_at - 1_000
    physics = Physics(completion="socket", socket_buffer_bytes=buffer_mib << 20)
    sock = _ring(k, physics, {}, dead={2: dead_at})
    sent, got = side_at(sock, [2], [0], True, late), side_at(sock, [2], [0], False, late)
    assert not sent.done and 0 < sent.bytes - got.bytes <= physics.socket_buffer_bytes
    waits_on_the_network = physics.socket_buffer_bytes < physics.slots * physics.chunk_bytes
    assert (sent.net_us > late - dead_at - 5_000) is waits_on_the_network


def test_time_on_the_network_of_a_stuck_send_grows_with_the_report_time() -> None:
    tr = _ring(6, Physics(), {}, dead={2: 2_000.0})
    early, late = (side_at(tr, [2], [0], True, t) for t in (20_000.0, 40_000.0))
    assert late.net_us - early.net_us == pytest.approx(20_000, abs=1)
    assert late.bytes == early.bytes and late.t_last == early.t_last


def test_t_first_is_this_ranks_own_proxy_start_so_a_late_peer_is_in_the_receivers_span() -> None:
    """NCCL's profiler stamps a peer's t_first when this rank's proxy op starts: a receiver
    that entered early waits inside its span for a late sender, but not on the network."""
    cfg = SimConfig(nranks=8, hosts_per_leaf=4, spines=2, duration_s=3.0, skew_us=0,
                    world_bytes=32 << 20, dp_bytes=8 << 20, faults=(Fault("noncomm_slow", 0.0, "3", factor=4.0),))
    run = simulate(cfg)
    proxy = cfg.physics.proxy_delay_us
    checked = 0
    for d in run.deliveries:
        rec = d.record
        if rec.comm != "world" or rec.rank != 4 or rec.t_end_us is None:
            continue
        recv = rec.peer(3, "recv")
        assert recv is not None and recv.t_first_us is not None and recv.t_last_us is not None
        assert recv.t_first_us == rec.t_start_us + int(proxy)
        span_rate = recv.bytes / (recv.t_last_us - recv.t_first_us)
        send = rec.peer(5, "send")
        assert send is not None and send.net_us is not None
        assert span_rate < 0.5 * (send.bytes / send.net_us)  # the wait is in the span only
        checked += 1
    assert checked >= 3


def test_a_records_bytes_and_flows_add_up() -> None:
    run = simulate(SimConfig(nranks=8, hosts_per_leaf=4, spines=2, duration_s=2.0,
                             world_bytes=32 << 20, dp_bytes=8 << 20))
    finished = [d.record for d in run.deliveries if d.record.t_end_us is not None]
    assert finished
    for rec in finished:
        for p in rec.peers:
            assert p.done and abs(sum(f.bytes for f in p.flows) - p.bytes) <= len(p.flows)
            assert p.net_us is not None and all(f.net_us is not None for f in p.flows)
            assert p.t_first_us is not None and p.t_last_us is not None
            if p.dir == "send":  # its own chunks' time is within its span
                assert p.net_us <= p.t_last_us - p.t_first_us
