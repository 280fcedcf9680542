"""Records in the job's terms: communicator ranks mapped to job ranks, never guessed."""

from __future__ import annotations

from node_agent.cache import AssignmentCache
from node_agent.shim_protocol import Coll, Conn, Peer, SockStat, Stats
from node_agent.telemetry import Capabilities, Mapper, capabilities

T0 = 1_764_430_000_000_000
RANKS = {r: (f"host{r // 2}", "mlx5_0") for r in range(8)}  # two ranks per host


def mapper(caps: Capabilities | None = None, grace_us: int = 2_000_000) -> Mapper:
    cache = AssignmentCache("host1")
    cache.update("j", RANKS, {"version": 1, "assignments": []})
    return Mapper(cache.job_for, grace_us, caps)


def coll(pid: int = 10, rank: int = 0, job_rank: int = 3, comm: int = 0xAB, seq: int = 1,
         peers: tuple[Peer, ...] = (), truncated: bool = False, t_end: int = T0 + 500) -> Coll:
    return Coll(comm, seq, 4096, T0, t_end, rank, 4, pid, "AllReduce", False, truncated, peers,
                job_rank)


def peer(p: int, d: str = "send", job: int = -1, net: int | None = None, nbytes: int = 100,
         ) -> Peer:
    return Peer(p, d, True, nbytes, T0 + 1 if nbytes else 0, T0 + 400 if nbytes else 0, job, net)


def test_shim_job_ranks_are_used_and_nets_follow_capabilities() -> None:
    m = mapper(Capabilities(net_us=True))
    out = m.on_coll(coll(peers=(peer(1, job=5, net=300), peer(3, "recv", job=2))), T0)
    assert len(out) == 1
    rec = out[0]
    assert (rec["job"], rec["comm"], rec["rank"], rec["nranks"]) == ("j", "0xab", 3, 4)
    assert [(p["peer"], p["dir"]) for p in rec["peers"]] == [(5, "send"), (2, "recv")]
    assert rec["peers"][0]["net_us"] == 300 and "net_us" not in rec["peers"][1]
    plain = mapper().on_coll(coll(peers=(peer(1, job=5, net=300),)), T0)[0]
    assert "net_us" not in plain["peers"][0]  # a controller without the field gets none


def test_sub_communicator_ranks_learned_from_another_local_process() -> None:
    """Ranks 2 and 3 share host1; in communicator 0xCD their ranks are 1 and 0. Process 20
    (job rank 2) does not know its peer's job rank, but process 21 (job rank 3, comm rank 0)
    reported itself, so comm rank 0 of 0xCD is job rank 3."""
    m = mapper()
    m.on_stats(Stats(20, 0, 0, 0, 0, 0, 0, 0, job_rank=2, job="j"), T0)
    first = m.on_coll(coll(pid=20, rank=1, job_rank=-1, comm=0xCD, peers=(peer(0),)), T0)
    assert first == []  # waits: the peer's job rank is not known yet
    m.on_coll(coll(pid=21, rank=0, job_rank=3, comm=0xCD, peers=(peer(1, "recv", job=2),)), T0)
    out = m.release(T0 + 1)
    assert [(r["rank"], [p["peer"] for p in r["peers"]]) for r in out] == [(2, [3])]
    assert m.counts.dropped == {} and m.counts.peers_dropped == 0


def test_unmappable_records_are_counted_and_dropped_after_the_grace() -> None:
    m = mapper(grace_us=1_000)
    assert m.on_coll(coll(pid=30, job_rank=-1), T0) == []  # no identity yet: held
    assert m.release(T0 + 500) == []
    assert m.release(T0 + 2_000) == []
    assert m.counts.dropped == {"unknown_rank": 1}
    m.on_coll(coll(pid=31, job_rank=42), T0)  # on no job of this host: which job? held ...
    m.release(T0 + 2_000)
    assert m.counts.dropped["unknown_job"] == 1  # ... and dropped
    m.on_stats(Stats(32, 0, 0, 0, 0, 0, 0, 0, job_rank=42, job="j"), T0)
    m.on_coll(coll(pid=32, job_rank=42), T0)  # the job says it has no rank 42
    assert m.counts.dropped["rank_not_in_job"] == 1


def test_an_unknown_peer_is_left_out_and_the_record_says_so_where_it_can() -> None:
    m = mapper(Capabilities(truncated=True), grace_us=1_000)
    assert m.on_coll(coll(peers=(peer(1, job=5), peer(2))), T0) == []
    out = m.release(T0 + 5_000)
    assert [p["peer"] for p in out[0]["peers"]] == [5] and out[0]["truncated"] is True
    assert m.counts.peers_dropped == 1
    quiet = mapper(grace_us=0).on_coll(coll(peers=(peer(1, job=5), peer(2))), T0)
    assert quiet == []  # grace 0 still goes through release()


def test_truncated_records_say_so_and_peers_never_name_the_rank_itself() -> None:
    m = mapper(Capabilities(truncated=True))
    out = m.on_coll(coll(truncated=True, peers=(peer(1, job=5),)), T0)
    assert out[0]["truncated"] is True
    m2 = mapper(grace_us=0)
    m2.on_coll(coll(peers=(peer(1, job=3),)), T0)  # a peer mapped to the rank itself
    assert [r["peers"] for r in m2.release(T0 + 1)] == [[]]


def test_in_flight_values_become_nulls() -> None:
    m = mapper()
    rec = m.on_coll(coll(t_end=0, peers=(peer(1, job=5, nbytes=0),)), T0)[0]
    assert rec["t_end_us"] is None
    assert rec["peers"][0]["t_first_us"] is None and rec["peers"][0]["t_last_us"] is None


def test_flows_come_from_the_connection_counters() -> None:
    m = mapper(Capabilities(net_us=True, flow_net_us=True))
    send = Conn(0xAB, "10.0.0.2", "10.0.1.2", 4792, 0, "send", 3, 10, False, 3000, 3, T0, T0 + 9,
                0, (SockStat(50000, 500_000, 2000, T0 + 9, 40), SockStat(50001, 500_000, 1000,
                                                                        T0 + 8, 20)),
                peer_job_rank=5, job_rank=3, peer_comm_rank=1, net_us=50)
    other = Conn(0xAB, "10.0.0.2", "10.0.1.2", 4792, 1, "send", 3, 10, False, 10, 1, T0, T0 + 9,
                 0, (SockStat(50000, 1, 10, T0, None), SockStat(50004, PPM_, 7, 0, 3)),
                 peer_job_rank=5, job_rank=3, peer_comm_rank=1)
    m.on_conn(send, T0)
    m.on_conn(other, T0)
    rec = m.on_coll(coll(peers=(peer(1, job=5), peer(1, "recv", job=5))), T0)[0]
    flows = rec["peers"][0]["flows"]
    assert [(f["sport"], f["bytes"]) for f in flows] == [(50000, 2000), (50001, 1000), (50004, 7)]
    assert flows[0]["net_us"] == 40 and flows[2]["t_last_us"] is None
    assert "flows" not in rec["peers"][1]  # no receive-side connection was reported
    m.expire(T0 + 601_000_000)
    assert not m.conns


PPM_ = 1_000_000


def test_capabilities_read_from_the_controllers_openapi() -> None:
    from controller.api.app import create_app

    caps = capabilities(create_app().openapi())
    assert isinstance(caps.net_us, bool) and isinstance(caps.heartbeat, bool)
    doc = {"components": {"schemas": {
        "PeerCreate": {"properties": {"peer": {}, "net_us": {}}},
        "FlowCreate": {"properties": {"sport": {}}},
        "CollectiveCreate": {"properties": {"truncated": {}}},
        "CollectiveBatch": {"properties": {"records": {"minItems": 0}}}}}}
    assert capabilities(doc) == Capabilities(net_us=True, flow_net_us=False, truncated=True,
                                             heartbeat=True)
    assert capabilities({}) == Capabilities()
    for records, ok in (({"type": "array", "maxItems": 10}, True), ({"minItems": 1}, False)):
        doc = {"components": {"schemas": {"CollectiveBatch": {"properties": {"records": records}}}}}
        assert capabilities(doc).heartbeat is ok


def test_records_wait_for_their_job_while_the_controller_is_away() -> None:
    jobs: dict[str, object] = {}
    cache = AssignmentCache("host1")
    m = Mapper(lambda named, rank: cache.job_for(named, rank), 1_000)
    m.on_stats(Stats(40, 0, 0, 0, 0, 0, 0, 0, job_rank=3, job="late"), T0)
    assert m.on_coll(coll(pid=40, job_rank=3), T0) == []
    assert m.release(T0 + 5_000, patient=True) == []  # past the grace, but patient
    assert m.counts.dropped == {} and len(m.held) == 1
    cache.update("late", RANKS, {"version": 1, "assignments": []})  # the controller is back
    out = m.release(T0 + 6_000)
    assert [r["job"] for r in out] == ["late"] and not jobs
