"""C4D on what the shim's TCP transport reports (nccl_shim/FORMAT.md "Network time in the
transport"), played with records shaped like the testbed's: per-flow counters that run from the
connection's opening, a flow's `net_us` until its bytes were acknowledged (window-held time left
out), and the profiler's connection `net_us` until the write into the socket buffer, which
back-pressure keeps "pending" on every connection of a stalled or paced ring.

A ring of four ranks, one per leaf, two flows per connection (channels), 3 MB per connection
per collective."""

from __future__ import annotations

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.matrix import reference
from controller.diagnosis.simfabric import SPORT_BASE, SimFabric, port_name
from controller.domain.alarms import AlarmKind, SuspectKind
from controller.domain.telemetry import CollectiveRecord, FlowProgress, PeerProgress

N = 4
RING = [(r, (r + 1) % N) for r in range(N)]
FABRIC = SimFabric(1, 2, 5, tuple(range(N)))
ROUTES = FABRIC.routes("j", RING, 2)
CONFIG = DiagnosisConfig(hang_timeout_s=6.0)
T0 = 1_764_430_000_000_000
CONN_BYTES = 3 << 20
FLOW_BYTES = CONN_BYTES // 2


def _flows(sent: int, net_us: list[int], t_last: int) -> tuple[FlowProgress, ...]:
    return tuple(FlowProgress(SPORT_BASE + i, sent, t_last, net_us[i]) for i in range(2))


class Ring:
    """Cumulative per-flow counters of each sender, advanced collective by collective."""

    def __init__(self) -> None:
        self.sent = {c: 0 for c in RING}
        self.net = {c: [0, 0] for c in RING}
        self.t = T0
        self.seq = 0
        self.records: list[CollectiveRecord] = []
        self.batches: list[tuple[int, list[CollectiveRecord]]] = []  # (arrival, records)

    def collective(self, duration_us: int, busy_us: dict[tuple[int, int], int]) -> None:
        """Every connection moves its share in `duration_us`; a flow of connection c is
        on the network (unacknowledged, not window-held) for busy_us[c]."""
        start, end = self.t, self.t + duration_us
        for c in RING:
            self.sent[c] += FLOW_BYTES
            self.net[c] = [n + busy_us[c] for n in self.net[c]]
        batch = []
        for rank in range(N):
            nxt, prv = (rank + 1) % N, (rank - 1) % N
            send = PeerProgress(nxt, "send", CONN_BYTES, start + 100, end - 100, True,
                                _flows(self.sent[(rank, nxt)], self.net[(rank, nxt)], end - 100),
                                duration_us - 300)  # written into the socket: the whole span
            recv = PeerProgress(prv, "recv", CONN_BYTES, start + 100, end - 50, True)
            batch.append(CollectiveRecord("j", "c", rank, N, "AllReduce", self.seq, CONN_BYTES,
                                          start, end, (send, recv), FABRIC.host(rank)))
        self.records += batch
        self.batches.append((end + 2_000, batch))
        self.seq += 1
        self.t = end + 1_000


def _findings(batches: list[tuple[int, list[CollectiveRecord]]], now_us: int,
              down: dict[str, str] | None = None) -> list:  # type: ignore[type-arg]
    """Records ingested as they arrive (host clocks are learnt from arrivals), then the
    findings at `now_us` (`down`: the links reported down)."""
    d = Diagnoser(CONFIG)
    for arrival, records in batches:
        d.ingest(records, arrival)
    return d.findings({"j": ROUTES}, now_us, None, down)


def test_reference_is_a_healthy_rate_when_half_the_connections_are_slow() -> None:
    assert reference([0.25, 0.25, 1.0, 1.0]) == 1.0
    assert reference([1.0, 0.9, 1.1]) == 1.05
    assert reference([2.0]) == 2.0


def test_a_host_link_at_a_quarter_rate_in_a_four_ring_is_its_port() -> None:
    """Host link of rank 1 shaped both ways: its two connections are on the network the whole
    (4x longer) collective, the two others a quarter of it. With counters from the
    connection's opening and the plain median this read 0.4 and opened nothing."""
    ring = _steady_ring()
    slow = {(0, 1), (1, 2)}
    for _ in range(12):
        ring.collective(2_000_000, {c: 1_950_000 if c in slow else 480_000 for c in RING})
    found = _findings(ring.batches, ring.t + 500_000)
    assert [f.kind for f in found] == [AlarmKind.COMM_SLOW]
    first = found[0].suspects[0]
    assert (first.kind, first.name) == (SuspectKind.NIC_PORT, port_name(1))
    assert set(found[0].evidence["slow_connections"]) == {"0->1", "1->2"}


def test_a_clean_tcp_ring_opens_nothing() -> None:
    ring = Ring()
    for i in range(16):
        ring.collective(500_000, {c: 450_000 + 10_000 * ((i + c[0]) % 4) for c in RING})
    assert _findings(ring.batches, ring.t + 500_000) == []


def _steady_ring() -> Ring:
    """A ring after four healthy collectives."""
    ring = Ring()
    for _ in range(4):
        ring.collective(500_000, {c: 480_000 for c in RING})
    return ring


def _dead_path_batches(stuck: tuple[int, int], stall_us: int = 8_000_000
                       ) -> tuple[Ring, list[tuple[int, list[CollectiveRecord]]], int]:
    """A steady ring, then every rank's in-flight record 8 s into a stall of connection
    `stuck` (its batches, with the earlier ones), and the stall's length."""
    ring = _steady_ring()
    return ring, [*ring.batches, (ring.t + stall_us - 100_000, _stalled(ring, stuck, stall_us))], stall_us


def _stalled(ring: Ring, stuck: tuple[int, int], stall_us: int,
             acks_lost: tuple[int, int] | None = None) -> list[CollectiveRecord]:
    """Collective `ring.seq` entered by every rank and stalled: the stuck connection's flow 0
    (the one over the dead link) stays unacknowledged (its `net_us` grows for the whole stall);
    its other flow, and every other sender, wrote
    what it had and is held by its receiver's window (its flows' `net_us` does not grow),
    though its writes are pending and its bytes unreceived. `acks_lost`: a connection whose
    flow 1 stays unacknowledged too, though its receiver got every byte (its ACKs cross the
    dead element)."""
    start = ring.t
    out = []
    for rank in range(N):
        nxt, prv = (rank + 1) % N, (rank - 1) % N
        c = (rank, nxt)
        written = 1 << 20
        grow = [stall_us if (c == stuck and i == 0) or (c == acks_lost and i == 1) else 200_000
                for i in range(2)]
        send = PeerProgress(nxt, "send", written, start + 100, start + 150_000, False,
                            _flows(ring.sent[c] + written // 2,
                                   [n + g for n, g in zip(ring.net[c], grow, strict=True)],
                                   start + 150_000), stall_us)  # pending writes: whole stall
        got = (prv, rank) == acks_lost
        recv = PeerProgress(prv, "recv", written if got else 512 << 10, start + 100, start + 140_000,
                            False, _flows(ring.sent[(prv, rank)] + written // 2, [0, 0], start + 140_000)
                            if got else ())
        out.append(CollectiveRecord("j", "c", rank, N, "AllReduce", ring.seq, CONN_BYTES,
                                    start, None, (send, recv), FABRIC.host(rank)))
    return out


def test_a_dead_fabric_link_under_a_stalled_tcp_ring_names_the_link_and_no_host() -> None:
    ring, batches, stall_us = _dead_path_batches(stuck := (1, 2))
    (finding,) = _findings(batches, ring.t + stall_us)
    assert finding.kind == AlarmKind.COMM_HANG
    assert finding.evidence["stuck_by"] == ["net"]
    assert set(finding.evidence["stuck_bytes"]) == {"1->2"}
    assert finding.evidence["stalled_flows"] == {"1->2": [SPORT_BASE]}
    fabric_links = set(ROUTES.connections[stuck][0].links[1:-1])
    first = finding.suspects[0]
    assert first.kind == SuspectKind.LINK and first.name in fabric_links, finding.suspects
    # one stuck flow: its two fabric links explain it equally (and its hosts and ports, which
    # are not named first: that would isolate a host on a guess)
    assert finding.evidence["equally_likely"] == 2


def test_a_link_its_switch_reports_down_is_named_first_of_the_equal_explanations() -> None:
    """The same stall: its two fabric links tie on the flows' evidence (first by name). When a
    switch reports an end of one of them not operationally up, that one is named, unambiguous,
    with why in the evidence; a reported-down link no stuck flow crosses changes nothing."""
    ring, batches, stall_us = _dead_path_batches(stuck := (1, 2))
    (plain,) = _findings(batches, ring.t + stall_us)
    fabric_links = list(ROUTES.connections[stuck][0].links[1:-1])
    other = next(n for n in fabric_links if n != plain.suspects[0].name)
    why = {other: "spine0:Ethernet1 ifOperStatus lowerLayerDown"}
    (finding,) = _findings(batches, ring.t + stall_us, why)
    assert finding.kind == AlarmKind.COMM_HANG
    assert (finding.suspects[0].kind, finding.suspects[0].name) == (SuspectKind.LINK, other), finding.suspects
    assert finding.evidence["equally_likely"] == 1
    assert finding.evidence["reported_down"] == why
    assert "reported down" in str(finding.evidence["summary"])
    stuck_links = {n for f in ROUTES.connections[stuck] for n in f.links}
    elsewhere = next(n for c in RING if c != stuck for f in ROUTES.connections[c] for n in f.links[1:-1]
                     if n not in stuck_links)
    (unmoved,) = _findings(batches, ring.t + stall_us, {elsewhere: "state down"})
    assert unmoved.suspects == plain.suspects and "reported_down" not in unmoved.evidence


def test_a_flow_whose_receiver_got_its_bytes_is_stuck_on_its_acks_not_its_path() -> None:
    """2->3's flow 1 is unacknowledged for the whole stall, but 3 received every byte 2 wrote:
    its ACKs' path (not planned) crosses the dead element. Counted as stuck on its own path it
    would make the host of rank 2, an endpoint of both 1->2 and 2->3, explain everything."""
    ring = _steady_ring()
    stall_us = 8_000_000
    stalled = _stalled(ring, (1, 2), stall_us, acks_lost=(2, 3))
    (finding,) = _findings([*ring.batches, (ring.t + stall_us - 100_000, stalled)], ring.t + stall_us)
    assert set(finding.evidence["stuck_bytes"]) == {"1->2"}
    assert finding.suspects[0].kind == SuspectKind.LINK, finding.suspects


def test_window_held_senders_are_not_stuck_by_bytes_sent_but_not_received() -> None:
    """Without per-flow network time the same stall names every pending sender."""
    ring = _steady_ring()
    stall_us = 8_000_000
    stalled = _stalled(ring, (1, 2), stall_us)
    bare = [CollectiveRecord(r.job, r.comm, r.rank, r.nranks, r.op, r.seq, r.bytes, r.t_start_us,
                             r.t_end_us, tuple(PeerProgress(p.peer, p.dir, p.bytes, p.t_first_us,
                                                            p.t_last_us, p.done, (), p.net_us)
                                               for p in r.peers), r.host)
            for r in stalled]
    (finding,) = _findings([*ring.batches, (ring.t + stall_us - 100_000, bare)], ring.t + stall_us)
    assert set(finding.evidence["stuck_bytes"]) == {f"{a}->{b}" for a, b in RING}


def _stopped_reader_batches(stall_us: int = 8_000_000
                           ) -> tuple[Ring, list[tuple[int, list[CollectiveRecord]]], int]:
    """A steady ring, then rank 1 stopped inside a collective: nothing left on the network,
    0->1's bytes delivered and acknowledged but never read (see the test below)."""
    ring = _steady_ring()
    fixed = []
    for r in _stalled(ring, (-1, -1), stall_us):
        if r.rank == 2:  # 1 -> 2: everything rank 1 wrote before it stopped was read
            send, recv = r.peers
            recv = PeerProgress(recv.peer, "recv", 1 << 20, recv.t_first_us, recv.t_last_us, False)
            r = CollectiveRecord(r.job, r.comm, r.rank, r.nranks, r.op, r.seq, r.bytes, r.t_start_us,
                                 None, (send, recv), r.host)
        fixed.append(r)
    return ring, [*ring.batches, (ring.t + stall_us - 100_000, fixed)], stall_us


def test_a_stopped_rank_that_no_longer_reads_is_named_by_its_host() -> None:
    """SIGSTOP of rank 1 inside a collective: nothing is left on the network; 0->1's bytes were
    delivered and acknowledged but never read, and every other sender waits on a receiver that
    waits on its own downstream. Rank 1 is the receiver whose own send holds nothing unread."""
    ring, batches, stall_us = _stopped_reader_batches()
    (finding,) = _findings(batches, ring.t + stall_us)
    assert finding.kind == AlarmKind.NONCOMM_HANG  # the network delivered: the process stopped
    assert finding.evidence["stuck_by"] == ["not_read"]
    assert finding.evidence["not_reading_ranks"] == [1]
    assert (finding.suspects[0].kind, finding.suspects[0].name) == (SuspectKind.HOST, FABRIC.host(1))


def test_counters_from_the_opening_without_a_baseline_are_no_evidence_of_a_stuck_flow() -> None:
    """A send whose per-flow counters run from the connection's opening (they hold more bytes
    than this collective moved) and whose previous record was lost: its flows' whole-life
    network time is not this collective's, so none of them reads as stuck (nor as clear)."""
    from controller.diagnosis.config import DiagnosisConfig
    from controller.diagnosis.hangs import _flow_extra, _flows_clear
    from controller.domain.telemetry import FlowProgress, PeerProgress

    p = PeerProgress(1, "send", 1 << 20, 1_000, 2_000, False,
                     (FlowProgress(50000, 64 << 20, 2_000, 90_000_000), FlowProgress(50001, 64 << 20, 2_000, 5)),
                     None)
    assert _flow_extra(p, {}) == {}
    assert _flow_extra(p, {50000: 89_999_000})[50000] == 1_000 - 1_000
    ctx = type("Ctx", (), {"config": DiagnosisConfig()})()
    assert not _flows_clear(p, None, ctx)  # type: ignore[arg-type]


def test_ranks_stuck_inside_a_collective_their_peers_left_are_a_comm_hang_not_a_noncomm_one() -> None:
    """Ranks 0 and 1 finished their part of collective k and wait in k+1; ranks 2 and 3 are
    still inside k behind a dead path (2->3's flow 0 unacknowledged). They "never entered" k+1,
    but they are not outside a collective: a comm_hang in k, localised on that flow's path,
    not a noncomm_hang that would isolate their hosts (seen on the testbed)."""
    ring = _steady_ring()
    stall_us = 8_000_000
    k = ring.seq
    stalled = _stalled(ring, (2, 3), stall_us)
    start = ring.t
    done = []
    for rec in stalled:
        if rec.rank in (0, 1):
            peers = tuple(PeerProgress(p.peer, p.dir, CONN_BYTES, p.t_first_us, start + 300_000, True,
                                       p.flows, p.net_us) for p in rec.peers)
            done.append(CollectiveRecord("j", "c", rec.rank, N, "AllReduce", k, CONN_BYTES, start,
                                         start + 300_000, peers, rec.host))
        else:
            done.append(rec)
    later = [CollectiveRecord("j", "c", r, N, "AllReduce", k + 1, CONN_BYTES, start + 310_000, None, (),
                              FABRIC.host(r)) for r in (0, 1)]
    batches = [*ring.batches, (start + stall_us - 100_000, done + later)]
    (finding,) = _findings(batches, start + stall_us)
    assert finding.kind == AlarmKind.COMM_HANG, finding
    assert finding.seq == k
    assert set(finding.evidence["stuck_bytes"]) == {"2->3"}
    assert finding.suspects[0].kind == SuspectKind.LINK, finding.suspects


def test_where_switches_report_port_states_a_hang_naming_no_reported_link_waits_for_a_late_report() -> None:
    """Timeout 6 s, hold 2 s: a comm_hang naming no reported-down link is held until 8 s of
    stall where switches report ports' states (their SNMP agents cache for seconds), not where
    they do not; one naming a reported-down link opens at once."""
    ring = _steady_ring()
    stuck = (1, 2)

    def opened(stall_us: int, reporting: bool, down: dict[str, str] | None = None) -> list[str]:
        d = Diagnoser(CONFIG)
        for arrival, records in [*ring.batches, (ring.t + stall_us - 100_000, _stalled(ring, stuck, stall_us))]:
            d.ingest(records, arrival)
        return [e.alarm.kind.value for e in d.evaluate({"j": ROUTES}, ring.t + stall_us, None, down, reporting)
                if e.event == "opened"]

    assert CONFIG.link_report_hold_s == 2.0
    assert opened(7_000_000, reporting=False) == ["comm_hang"]
    assert opened(7_000_000, reporting=True) == []
    assert opened(8_200_000, reporting=True) == ["comm_hang"]
    link = ROUTES.connections[stuck][0].links[1]
    assert opened(7_000_000, reporting=True, down={link: "leaf0:Ethernet0 ifOperStatus down"}) == ["comm_hang"]


def _left_k(dead: bool) -> tuple[list[tuple[int, list[CollectiveRecord]]], int, int]:
    """Ranks 0 and 1 finished collective k and wait in k+1; ranks 2 and 3 are inside k, 2 short
    of what 1 wrote. Over TCP a send completes once its bytes are in the socket buffer, so rank
    1 left k with its last chunk to 2 unacknowledged; its record of k is final and its flows'
    counters stopped there (a few ms past the last write: nothing stuck yet). In its record of
    k+1 (counters from the connection's opening, the same sockets) 1->2's flow 0 is
    unacknowledged the whole stall when `dead` (its path black-holed), else window-held like
    flow 1 (rank 2 stopped reading). Returns (batches, k, now)."""
    ring = _steady_ring()
    stall_us = 8_000_000
    k, start = ring.seq, ring.t
    left = start + 300_000  # ranks 0 and 1 leave k here
    recs = []
    for rank in range(N):
        nxt, prv = (rank + 1) % N, (rank - 1) % N
        c, up = (rank, nxt), (prv, rank)
        if rank in (0, 1):  # done with k: everything written, flows as of the record's end
            send = PeerProgress(nxt, "send", CONN_BYTES, start + 100, left - 100, True,
                                _flows(ring.sent[c] + FLOW_BYTES, [n + 280_000 for n in ring.net[c]], left - 100),
                                left - start - 200)
            recv = PeerProgress(prv, "recv", CONN_BYTES, start + 100, left - 50, True)
            recs.append(CollectiveRecord("j", "c", rank, N, "AllReduce", k, CONN_BYTES, start, left,
                                         (send, recv), FABRIC.host(rank)))
            continue
        got = (1 << 20) if up == (1, 2) else (2 << 20)
        send = PeerProgress(nxt, "send", got, start + 100, start + 200_000, False,
                            _flows(ring.sent[c] + got // 2, [n + 200_000 for n in ring.net[c]], start + 200_000),
                            stall_us)
        recv = PeerProgress(prv, "recv", got, start + 100, start + 200_000, False,
                            _flows(ring.sent[up] + got // 2, [0, 0], start + 200_000))
        recs.append(CollectiveRecord("j", "c", rank, N, "AllReduce", k, CONN_BYTES, start, None,
                                     (send, recv), FABRIC.host(rank)))
    sent1 = ring.sent[(1, 2)] + FLOW_BYTES
    net1 = [ring.net[(1, 2)][0] + 280_000 + (stall_us if dead else 20_000), ring.net[(1, 2)][1] + 280_000 + 20_000]
    later = [
        CollectiveRecord("j", "c", 1, N, "AllReduce", k + 1, CONN_BYTES, left + 1_000, None,
                         (PeerProgress(2, "send", 0, None, None, False, _flows(sent1, net1, left - 100), stall_us),
                          PeerProgress(0, "recv", 0, None, None, False)), FABRIC.host(1)),
        CollectiveRecord("j", "c", 0, N, "AllReduce", k + 1, CONN_BYTES, left + 1_000, None,
                         (PeerProgress(1, "send", 1 << 20, left + 1_100, left + 50_000, False,
                                       _flows(ring.sent[(0, 1)] + FLOW_BYTES + (1 << 19),
                                              [n + 300_000 for n in ring.net[(0, 1)]], left + 50_000), stall_us),
                          PeerProgress(3, "recv", 0, None, None, False)), FABRIC.host(0)),
    ]
    return [*ring.batches, (left + stall_us - 100_000, recs + later)], k, left + stall_us


def test_a_dead_path_whose_sender_already_left_the_collective_is_a_comm_hang_not_its_receivers_hosts() -> None:
    """Ranks 2 and 3 stuck inside k behind 1->2's dead path while 0 and 1 wait in k+1 (`_left_k`):
    a comm_hang in k on 1->2's path, found in rank 1's record of k+1, not a noncomm_hang naming
    the hosts of 2 and 3 (with auto-isolation on, a healthy host isolated: seen on the testbed,
    2x3x2 seed 5, where the rule for ranks stuck in k found nothing stuck in k's records). A
    receiver that stopped reading instead (1->2's flows window-held in k+1) keeps its
    noncomm_hang on rank 2's host."""
    batches, k, now = _left_k(dead=True)
    found = _findings(batches, now)
    assert [f.kind for f in found] == [AlarmKind.COMM_HANG], found
    (finding,) = found
    assert finding.seq == k
    assert set(finding.evidence["stuck_bytes"]) == {"1->2"}, finding.evidence
    assert finding.evidence["stalled_flows"] == {"1->2": [SPORT_BASE]}
    first = finding.suspects[0]
    assert first.kind == SuspectKind.LINK and first.name in set(ROUTES.connections[(1, 2)][0].links[1:-1]), \
        finding.suspects
    batches, k, now = _left_k(dead=False)
    (stopped,) = _findings(batches, now)
    assert stopped.kind == AlarmKind.NONCOMM_HANG
    assert (stopped.suspects[0].kind, stopped.suspects[0].name) == (SuspectKind.HOST, FABRIC.host(2))


def test_a_rank_waiting_in_a_communicator_stuck_on_the_network_is_not_named_as_stopped() -> None:
    """Two communicators of one job: "c" stalled behind a dead path (1->2, stuck on the
    network: every rank inside it), "d" where rank 1 does not read what 0 delivered. Rank 1
    waits in "c", it is not stopped: "d" is a victim and only "c"'s comm_hang opens (naming
    rank 1's host would isolate a healthy host). Alone, "d" is a stopped process (the test
    above)."""
    from dataclasses import replace

    ring, dead, stall_us = _dead_path_batches((1, 2))
    _, stopped, _ = _stopped_reader_batches(stall_us)
    other = [(at, [replace(r, comm="d") for r in recs]) for at, recs in stopped]
    findings = _findings(sorted([*dead, *other], key=lambda b: b[0]), ring.t + stall_us)
    assert [(f.kind, f.comm) for f in findings] == [(AlarmKind.COMM_HANG, "c")], findings
    assert findings[0].suspects[0].kind == SuspectKind.LINK
