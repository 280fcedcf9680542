"""The fast path gives exactly the record the general path gives, or declines."""

from __future__ import annotations

import json
import random

import pytest

from controller.domain import coll_packed
from node_agent import packed
from node_agent.cache import AssignmentCache
from node_agent.shim_protocol import Coll, Conn, Peer, SockStat, Stats, batch_parts, encode
from node_agent.telemetry import Capabilities, Mapper

T0 = 1_764_430_000_000_000
RANKS = {r: ("host0" if r < 4 else "host1", "m") for r in range(8)}


def mapper(caps: Capabilities) -> Mapper:
    cache = AssignmentCache("host0")
    cache.update("job-\"x\"", RANKS, {"version": 1, "assignments": []})  # a name JSON escapes
    m = Mapper(cache.job_for, 0, caps)
    for pid in (1, 2):
        m.on_stats(Stats(pid, 0, 0, 0, 0, 0, 0, 0, job_rank=pid, job='job-"x"'), T0)
    return m


def random_coll(rng: random.Random) -> Coll:
    pid = rng.choice((1, 2))
    peers = []
    for _ in range(rng.randint(0, 8)):
        moved = rng.random() < 0.8
        t = T0 + rng.randint(1, 10**6)
        peers.append(Peer(rng.choice((5, 6, 7)), rng.choice(("send", "recv")), rng.random() < .5,
                          rng.randint(1, 10**9) if moved else 0, t if moved else 0,
                          t + rng.randint(0, 10**6) if moved else 0, rng.choice((4, 5, 6, 7)),
                          rng.choice((None, rng.randint(0, 10**6)))))
    t_end = rng.choice((0, T0 + 2 * 10**6, T0 - 1))
    return Coll(rng.getrandbits(64), rng.getrandbits(40), rng.getrandbits(40), T0, t_end,
                rng.randint(0, 7), rng.randint(1, 16), pid, rng.choice(("AllReduce", "Other")),
                rng.random() < 0.2, rng.random() < 0.2, tuple(peers),
                rng.choice((-1, pid)))


def decoded(entry: tuple[bytes, bytes], truncated_ok: bool) -> dict[str, object]:
    """A packed entry as the controller decodes it, in the JSON form's terms."""
    body = coll_packed.encode("host0", [entry])
    header, start = coll_packed.decode_header(body)
    (rec,) = coll_packed.records(body, start, [coll_packed.shape(s) for s in header["shapes"]])
    return packed.as_dict(rec, truncated_ok)


@pytest.mark.parametrize("caps", [Capabilities(), Capabilities(True, True, True, True),
                                  Capabilities(packed=True), Capabilities(True, True, True, True, True)])
def test_same_record_as_the_general_path(caps: Capabilities) -> None:
    """JSON text or packed entry (decoded as the controller does): the general path's record;
    and the general path's record as a packed entry decodes to itself."""
    rng = random.Random(11)
    fast, slow = mapper(caps), mapper(caps)
    conn = Conn(0, "a", "b", 1, 0, "send", 1, 1, False, 10, 1, T0, T0 + 1, 0,
                (SockStat(50000, 1, 10, T0 + 1, 7),), peer_job_rank=5, peer_comm_rank=5)
    taken = 0
    for _ in range(400):
        c = random_coll(rng)
        if rng.random() < 0.3:  # per-flow counters for some of the record's connections
            k = Conn(c.comm_hash, "a", "b", 1, 0, "send", 1, c.pid, False, 10, 1, T0, T0 + 1, 0,
                     conn.socks, peer_job_rank=5, job_rank=c.pid, peer_comm_rank=5)
            fast.on_conn(k, T0)
            slow.on_conn(k, T0)
        want = slow.on_coll(c, T0)
        if caps.packed:
            entry = fast.coll_entry(encode(c))
            got = None if entry is None else decoded(entry, True)
        else:
            text = fast.coll_json(encode(c))
            got = None if text is None else json.loads(text)
        for rec in want:
            assert decoded(packed.entry(rec), caps.truncated or caps.packed) == rec
        if got is None:  # declined: the general path would then do what `slow` did
            continue
        taken += 1
        assert got == want[0]
    assert taken > 100  # self-contradicting peers (one comm rank, two job ranks) go the general way
    assert fast.counts.records_out == taken


def test_declines_what_needs_the_general_path() -> None:
    m = mapper(Capabilities())
    ok = Coll(7, 1, 2, T0, T0 + 5, 0, 2, 1, "AllReduce", peers=(Peer(1, "send", True, 1, T0, T0, 5),),
              job_rank=1)
    assert m.coll_json(encode(ok)) is not None
    unknown_peer = Coll(7, 2, 2, T0, T0 + 5, 0, 2, 1, "AllReduce",
                        peers=(Peer(3, "send", True, 1, T0, T0, -1),), job_rank=1)
    assert m.coll_json(encode(unknown_peer)) is None  # comm rank 3 of 7: not learned yet
    stranger = Coll(7, 3, 2, T0, T0 + 5, 0, 2, 99, "AllReduce", job_rank=1)
    assert m.coll_json(encode(stranger)) is None  # no STATS from pid 99 yet
    data = bytearray(encode(ok))
    data[6] = 1  # reserved header byte
    assert m.coll_json(bytes(data)) is None


def test_a_batch_gives_what_its_messages_give_one_by_one() -> None:
    """Records read in place from a BATCH, with a CONN between them changing the flows of the
    records after it, are the records of decoding each message in order (`_general`)."""
    from dataclasses import replace

    from node_agent import coll_fast
    from node_agent.shim_protocol import decode, encode_batch

    caps = Capabilities(True, True, True, True)
    rng = random.Random(5)
    fast, slow = mapper(caps), mapper(caps)

    def general(m: Mapper, part: bytes, out: list[dict]) -> None:  # type: ignore[type-arg]
        msg = decode(part)
        if isinstance(msg, Coll):
            out.extend(m.on_coll(msg, T0))
        elif isinstance(msg, Conn):
            m.on_conn(msg, T0)

    taken = 0
    for _ in range(60):
        msgs = []
        for _ in range(rng.randint(1, 10)):
            if rng.random() < 0.3:
                pid, peer = rng.choice((1, 2)), rng.choice((5, 6, 7))
                socks = (SockStat(rng.randint(49152, 65535), 1, rng.randint(1, 10**6), T0 + 1,
                                  rng.randint(0, 10**6)),)
                msgs.append(encode(Conn(7, "10.0.0.1", "10.0.0.2", 1, 0, rng.choice(("send", "recv")), 1, pid,
                                        False, 10, 1, T0, T0 + 1, 0, socks, peer_job_rank=peer,
                                        job_rank=pid, peer_comm_rank=peer)))
            else:
                msgs.append(encode(replace(random_coll(rng), comm_hash=7)))
        data = encode_batch(msgs)
        want: list[dict] = []  # type: ignore[type-arg]
        for part in msgs:
            general(slow, part, want)
        got: list[dict] = []  # type: ignore[type-arg]
        parts = batch_parts(data)
        assert parts is not None and [data[o:o + n] for o, n, _ in parts] == msgs
        texts = coll_fast.batch(fast, data, parts,
                                lambda part, got=got: general(fast, part, got))  # type: ignore[misc]
        taken += len(texts)
        got += [json.loads(t) for t in texts]
        key = lambda r: r["seq"]  # noqa: E731
        assert sorted(got, key=key) == sorted(want, key=key)
    assert taken > 60
    assert fast.counts.records_out == slow.counts.records_out


def test_a_packed_batch_reusing_shapes_gives_what_its_messages_give_one_by_one() -> None:
    """In the packed form a BATCH's messages that differ only in their counters reuse the
    first one's shape: still the general path's records, in order, also when a CONN between
    them changes the flows, a record re-maps a communicator rank (the rank table changes), or
    a record has no start time (the general path's)."""
    from node_agent import coll_fast
    from node_agent.shim_protocol import decode, encode_batch

    caps = Capabilities(True, True, True, True, True)
    rng = random.Random(8)
    fast, slow = mapper(caps), mapper(caps)

    def general(m: Mapper, part: bytes, out: list[dict]) -> None:  # type: ignore[type-arg]
        msg = decode(part)
        if isinstance(msg, Coll):
            out.extend(m.on_coll(msg, T0))
        elif isinstance(msg, Conn):
            m.on_conn(msg, T0)

    def coll(seq: int) -> Coll:  # a small space of shapes: most messages share one
        pid = rng.choice((1, 1, 1, 2))
        peer = rng.choice((5, 5, 5, 6))
        pjr = rng.choice((peer, peer, peer, -1, 7))  # 7: the comm rank re-mapped (a conflict)
        t = T0 + rng.randint(1, 10**6)
        moved = rng.random() < 0.9
        return Coll(7, seq, rng.getrandbits(30), rng.choice((T0, T0, T0, 0)), t + 5, pid - 1, 8,
                    pid, "AllReduce", peers=(
                        Peer(peer, "send", True, rng.getrandbits(20) if moved else 0, t if moved else 0,
                             t + 3 if moved else 0, pjr, rng.choice((None, 9))),),
                    job_rank=pid)

    reused = seq = 0
    for _ in range(80):
        msgs = []
        for _ in range(rng.randint(1, 16)):
            if rng.random() < 0.1:
                pid, peer = rng.choice((1, 2)), rng.choice((5, 6))
                socks = (SockStat(rng.randint(49152, 65535), 1, rng.randint(1, 10**6), T0 + 1,
                                  rng.randint(0, 10**6)),)
                msgs.append(encode(Conn(7, "10.0.0.1", "10.0.0.2", 1, 0, "send", 1, pid, False, 10,
                                        1, T0, T0 + 1, 0, socks, peer_job_rank=peer,
                                        job_rank=pid, peer_comm_rank=peer)))
            else:
                seq += 1
                msgs.append(encode(coll(seq)))
        data = encode_batch(msgs)
        want: list[dict] = []  # type: ignore[type-arg]
        for part in msgs:
            general(slow, part, want)
        got: list[dict] = []  # type: ignore[type-arg]
        parts = batch_parts(data)
        assert parts is not None
        before = fast.counts.records_out
        entries = coll_fast.batch(fast, data, parts,
                                  lambda part, got=got: general(fast, part, got),  # type: ignore[misc]
                                  packed=True)
        reused += len(entries) - len({e[0] for e in entries})
        got += [decoded(e, True) for e in entries]
        assert fast.counts.records_out - before == len(got)
        key = lambda r: r["seq"]  # noqa: E731
        assert sorted(got, key=key) == sorted(want, key=key)
    assert reused > 100  # many messages took a shape seen before in their batch
    assert fast.counts.records_out == slow.counts.records_out
    assert fast.counts.conflicts == slow.counts.conflicts > 0


def test_a_malformed_batch_is_not_taken_at_all() -> None:
    from node_agent.shim_protocol import encode_batch

    ok = encode(Coll(7, 1, 2, T0, T0 + 5, 0, 2, 1, "AllReduce",
                     peers=(Peer(1, "send", True, 1, T0, T0, 5),), job_rank=1))
    data = encode_batch([ok, ok])
    assert batch_parts(data) == [(8, len(ok), 3), (8 + len(ok), len(ok), 3)]
    inner = len(ok) + 8  # the second part's header
    for bad in (data[:-1], data[:8] + data[9:], data.replace(b"C4", b"C5", 1),
                data[:inner] + b"XX" + data[inner + 2:],  # a part with a bad magic
                data[:inner + 6] + b"\x01" + data[inner + 7:]):  # ... reserved bytes set
        assert batch_parts(bad) is None


def test_records_of_one_process_that_differ_in_shape_each_get_their_own_text() -> None:
    """The fast path keeps one format per record shape: which peers moved bytes, an open
    record, a rank table that changed since, new per-flow counters. Each must show."""
    caps = Capabilities(True, True, True, True)
    fast, slow = mapper(caps), mapper(caps)
    moved, still = (1000, T0 + 10, T0 + 20), (0, 0, 0)

    def rec(seq: int, a: tuple[int, int, int], b: tuple[int, int, int], t_end: int = T0 + 50,
            jr: int = 5) -> Coll:
        return Coll(9, seq, 2000, T0, t_end, 0, 4, 1, "AllReduce", peers=(
            Peer(1, "send", True, *a, jr, 7), Peer(2, "recv", False, *b, -1, None)), job_rank=1)

    fast.on_conn(Conn(9, "10.0.0.1", "10.0.0.2", 1, 0, "recv", 1, 1, False, 10, 1, T0, T0 + 1, 0,
                      (SockStat(50001, 1, 10, T0 + 1, 7),), peer_job_rank=6, job_rank=1,
                      peer_comm_rank=2), T0)
    slow.on_conn(Conn(9, "10.0.0.1", "10.0.0.2", 1, 0, "recv", 1, 1, False, 10, 1, T0, T0 + 1, 0,
                      (SockStat(50001, 1, 10, T0 + 1, 7),), peer_job_rank=6, job_rank=1,
                      peer_comm_rank=2), T0)
    newer = Conn(9, "10.0.0.1", "10.0.0.2", 1, 0, "recv", 1, 1, False, 10, 1, T0, T0 + 1, 0,
                 (SockStat(50001, 1, 99, T0 + 9, 70),), peer_job_rank=6, job_rank=1,
                 peer_comm_rank=2)
    steps: list[Coll | Conn] = [
        rec(1, moved, moved), rec(2, moved, still), rec(3, still, moved), rec(4, moved, moved),
        rec(5, moved, moved, t_end=0), rec(6, moved, moved), newer, rec(7, moved, moved),
        rec(8, moved, moved, jr=4), rec(9, moved, moved),  # comm rank 1 is now job rank 4
        # another process says comm rank 2 is job rank 7 (pid 1's flows for it do not change)
        Coll(9, 11, 2000, T0, T0 + 50, 3, 4, 2, "AllReduce",
             peers=(Peer(2, "send", True, *moved, 7, None),), job_rank=2),
        rec(12, moved, moved),
    ]
    for i, step in enumerate(steps):
        if isinstance(step, Conn):
            fast.on_conn(step, T0)
            slow.on_conn(step, T0)
            continue
        got = fast.coll_json(encode(step))
        assert got is not None, i
        assert json.loads(got) == slow.on_coll(step, T0)[0], i
    assert json.loads(got)["peers"][1]["peer"] == 7


def test_a_small_shape_space_reuses_formats_and_still_matches() -> None:
    """Many records of few shapes (one communicator, peers named by job rank or left to the
    rank table), CONNs changing flows, the controller's capabilities changing, expiry: the
    kept formats must give the general path's record every time."""
    rng = random.Random(17)
    caps_cycle = [Capabilities(), Capabilities(True, True, True, True)]
    fast, slow = mapper(caps_cycle[1]), mapper(caps_cycle[1])
    hits = 0
    for i in range(3000):
        r = rng.random()
        if r < 0.05:
            k = Conn(9, "10.0.0.1", "10.0.0.2", 1, 0, rng.choice(("send", "recv")), 1, 1, False,
                     10, 1, T0, T0 + 1, 0, (SockStat(50000 + rng.randrange(3), 1,
                                                      rng.randint(1, 10**6), T0 + 1, 7),),
                     peer_job_rank=rng.choice((5, 6)), job_rank=1,
                     peer_comm_rank=rng.choice((1, 2)))
            fast.on_conn(k, T0)
            slow.on_conn(k, T0)
            continue
        if r < 0.06:
            caps = rng.choice(caps_cycle)
            fast.caps = slow.caps = caps
            continue
        if r < 0.07:
            fast.expire(T0)
            slow.expire(T0)
            continue
        peers = []
        for cr, jr, d in ((1, 5, "send"), (2, 6, "recv"))[: 1 + (rng.random() < 0.9)]:
            moved = rng.random() < 0.95
            t = T0 + rng.randint(1, 1000)
            peers.append(Peer(cr, d, rng.random() < 0.95,
                              rng.randint(1, 10**6) if moved else 0, t if moved else 0,
                              t + 5 if moved else 0, rng.choice((jr, -1)),
                              rng.randint(0, 999) if rng.random() < 0.9 else None))
        c = Coll(9, i, 100, T0, T0 + 9 if rng.random() < 0.95 else 0, 0, 4, 1,
                 "AllReduce" if rng.random() < 0.95 else "AllGather", False,
                 rng.random() < 0.05, tuple(peers), 1)
        before = sum(len(ctx[8]) for ctx in fast.fast_ctx.values())
        got = fast.coll_json(encode(c))
        want = slow.on_coll(c, T0)
        if got is None:
            continue
        hits += sum(len(ctx[8]) for ctx in fast.fast_ctx.values()) == before
        assert json.loads(got) == want[0], i
    assert hits > 1000  # most records were formatted by a kept format
    assert fast.counts.conflicts == slow.counts.conflicts


def test_a_record_contradicting_the_rank_table_is_rendered_as_the_general_path_does() -> None:
    caps = Capabilities(True, True, True, True)
    fast, slow = mapper(caps), mapper(caps)
    for m in (fast, slow):  # comm rank 1 was job rank 4
        m.on_coll(Coll(9, 0, 1, T0, T0 + 1, 0, 4, 1, "AllReduce",
                       peers=(Peer(1, "send", True, 1, T0, T0, 4),), job_rank=1), T0)
    for seq in range(1, 6):  # now a record names it by the table (-1) and as job rank 5
        c = Coll(9, seq, 1, T0, T0 + 1, 0, 4, 1, "AllReduce", peers=(
            Peer(1, "recv", True, 1, T0, T0, -1), Peer(1, "send", True, 1, T0, T0, 5)), job_rank=1)
        got = fast.coll_json(encode(c))
        want = slow.on_coll(c, T0)[0]
        if got is not None:
            assert json.loads(got) == want
        else:  # declined: the general path renders and counts it
            fast.on_coll(c, T0)
        assert [p["peer"] for p in want["peers"]] == [5, 5]
    assert fast.counts.conflicts == slow.counts.conflicts


def test_formats_per_communicator_are_bounded() -> None:
    from node_agent import coll_fast

    m = mapper(Capabilities())
    for seq in range(coll_fast.MAX_SHAPES * 3):  # a new shape each time: a new peer comm rank
        c = Coll(9, seq, 1, T0, T0 + 1, 0, 4, 1, "AllReduce",
                 peers=(Peer(100 + seq, "send", True, 1, T0, T0 + 1, 4),), job_rank=1)
        assert m.coll_json(encode(c)) is not None
    assert len(m.fast_ctx) == 1
    assert 0 < len(next(iter(m.fast_ctx.values()))[8]) <= coll_fast.MAX_SHAPES


@pytest.mark.parametrize(("seed", "conflicts"), [(1, False), (2, True), (3, True)])
def test_shape_reuse_matches_message_by_message_under_any_mutation(seed: int, conflicts: bool) -> None:
    """A seeded property test of `_batch_packed`'s shape reuse: on twin Mappers, a BATCH through
    `coll_fast.batch(packed=True)` gives the same entries, general-path records and Mapper state
    as its messages one by one (`coll_packed_at`, else the general path). Messages vary in every
    byte the reuse key holds or must hold: process, communicator, rank, nranks, op, flags
    (in flight, truncated), job rank, peer count (0-8), peers' communicator and job ranks
    (`conflicts`: often contradicting the rank table), direction, done, net flag, odd bytes (a dir or
    done of 2, a reserved word set). Half of them are followed by the same key with new
    counters (what the reuse takes), and as many by a near miss: the same message, new
    counters, and ONE of those fields changed (what the reuse must not take). Between
    datagrams the Mapper changes as it does from other traffic: lookups naming processes' jobs,
    new rank tables, capabilities, expiry. (Each of those fields left out of the reuse key
    fails this test.)"""
    import dataclasses

    from node_agent import coll_fast
    from node_agent.shim_protocol import _COLL, _HEADER, OPS, Lookup, decode, encode_batch

    rng = random.Random(seed)

    def ranks(n: int) -> dict[int, tuple[str, str]]:
        return {r: ("host0" if r < 4 else "host1", "m") for r in range(n)}

    def make() -> tuple[AssignmentCache, Mapper]:
        cache = AssignmentCache("host0")
        cache.update("jA", ranks(8), {"version": 1, "assignments": []})
        cache.update("jB", ranks(12), {"version": 1, "assignments": []})
        m = Mapper(cache.job_for, 0, Capabilities(True, True, True, True, True))
        for pid in (1, 2, 3):
            m.on_stats(Stats(pid, 0, 0, 0, 0, 0, 0, 0, job_rank=pid, job="jA" if pid < 3 else "jB"), T0)
        return cache, m

    def general(m: Mapper, part: bytes, out: list[str]) -> None:
        msg = decode(part)
        if isinstance(msg, Coll):
            out.append(repr(m.on_coll(msg, T0)))
        elif isinstance(msg, Conn):
            m.on_conn(msg, T0)
        else:
            out.append(repr(msg))

    peer_at = _HEADER.size + _COLL.size

    def coll_msg(seq: int) -> Coll:
        pid = rng.choice((1, 1, 2, 3, 4))
        n = rng.choice((0, 1, 2, 2, 3, 8))
        peers = []
        for _ in range(n):
            pc = rng.choice((0, 5, 5, 6, 7, 9))
            pjr = rng.choice((pc, pc, pc, pc, pc, -1, -1, 7, 10, pid)) if conflicts else rng.choice((pc, -1))
            moved = rng.random() < 0.8
            t = T0 + rng.randint(1, 10**6)
            peers.append(Peer(pc, rng.choice(("send", "recv")), rng.random() < .5,
                              rng.getrandbits(20) if moved else 0, t if moved else 0, t + 3 if moved else 0,
                              pjr, rng.choice((None, 9))))
        return Coll(rng.choice((7, 7, 9)), seq, rng.getrandbits(30), rng.choice((T0, T0, T0, T0, 0)),
                    rng.choice((T0 + 5, 0, T0 - 1)), rng.choice((pid - 1, 0, 3)), rng.choice((8, 8, 12)), pid,
                    rng.choice(("AllReduce", "AllReduce", "Other")), rng.random() < 0.1, rng.random() < 0.2,
                    tuple(peers), rng.choice((pid, pid, -1, 5)))

    ops = sorted(set(OPS.values()) | {"Other"})

    def near_miss(c: Coll, seq: int) -> Coll:
        """`c` with new counters and one field of its key changed."""
        c = dataclasses.replace(c, seq=seq, bytes=rng.getrandbits(30))
        field = rng.choice(("comm", "op", "inflight", "truncated", "nranks", "job_rank", "rank", "pid", "peers",
                            "peer"))
        if field == "comm":
            return dataclasses.replace(c, comm_hash=16 - c.comm_hash)  # 7 <-> 9
        if field == "op":
            return dataclasses.replace(c, op=rng.choice([o for o in ops if o != c.op]))
        if field in ("inflight", "truncated"):
            return dataclasses.replace(c, **{field: not getattr(c, field)})
        if field == "nranks":
            return dataclasses.replace(c, nranks=20 - c.nranks)  # 8 <-> 12
        if field == "job_rank":
            return dataclasses.replace(c, job_rank=rng.choice([r for r in (-1, 1, 2, 3, 5) if r != c.job_rank]))
        if field == "rank":
            return dataclasses.replace(c, rank=(c.rank + 1) % 4)
        if field == "pid":
            return dataclasses.replace(c, pid=rng.choice([p for p in (1, 2, 3) if p != c.pid]))
        if field == "peers" or not c.peers:  # one peer fewer, or one more
            more = (Peer(6, "send", True, 5, T0 + 1, T0 + 2, 6, None),)
            fewer = len(c.peers) == 8 or (c.peers and rng.random() < .5)
            return dataclasses.replace(c, peers=c.peers[:-1] if fewer else c.peers + more)
        i = rng.randrange(len(c.peers))
        p = c.peers[i]
        p = rng.choice((dataclasses.replace(p, peer=9 if p.peer != 9 else 5),
                        dataclasses.replace(p, peer_job_rank=rng.choice(
                            [r for r in (-1, p.peer, 7, 10) if r != p.peer_job_rank])),
                        dataclasses.replace(p, dir="recv" if p.dir == "send" else "send"),
                        dataclasses.replace(p, done=not p.done),
                        dataclasses.replace(p, net_us=None if p.net_us is not None else 9)))
        return dataclasses.replace(c, peers=(*c.peers[:i], p, *c.peers[i + 1:]))

    def wire(c: Coll) -> bytes:
        b = bytearray(encode(c))
        if c.peers and rng.random() < 0.05:  # odd bytes: dir 2, done 2, a peer's reserved word
            b[peer_at + 48 * rng.randrange(len(c.peers)) + rng.choice((8, 9, 12))] = 2
        return bytes(b)

    def conn_msg() -> bytes:
        pid, peer = rng.choice((1, 2, 3)), rng.choice((5, 6, 7, 9))
        socks = tuple(SockStat(rng.randint(49152, 65535), 1, rng.randint(1, 10**6), T0 + 1, rng.randint(0, 10**6))
                      for _ in range(rng.randint(0, 2)))
        return encode(Conn(rng.choice((7, 9)), "10.0.0.1", "10.0.0.2", 1, rng.randint(0, 1),
                           rng.choice(("send", "recv")), 1, pid, rng.random() < 0.2, 10, 1, T0, T0 + 1, 0, socks,
                           peer_job_rank=rng.choice((peer, 7, -1)), job_rank=pid, peer_comm_rank=peer))

    (ca, fast), (cb, slow) = make(), make()
    seq = reused = 0
    for it in range(400):
        r = rng.random()  # between datagrams: the Mapper's state changes, as other traffic does
        if r < 0.05:
            pid, job, jr = rng.choice((1, 2, 3, 4)), rng.choice(("jA", "jB", "")), rng.choice((-1, 1, 2, 3, 9))
            for m in (fast, slow):
                m.on_lookup(Lookup(0, pid, 7, "10.0.0.1", "10.0.0.2", 1, 0, "tcp", 4, 0, jr, 0, job), T0)
        elif r < 0.08:
            n, job = rng.choice((6, 8, 12)), rng.choice(("jA", "jB"))
            for c in (ca, cb):
                c.update(job, ranks(n), {"version": it, "assignments": []})
        elif r < 0.10:
            fast.caps = slow.caps = Capabilities(*(rng.random() < .5 for _ in range(4)), True)
        elif r < 0.11:
            fast.expire(T0 + 10**9)
            slow.expire(T0 + 10**9)
        msgs = []
        for _ in range(rng.randint(1, 20)):
            if rng.random() < 0.07:
                msgs.append(conn_msg())
                continue
            seq += 1
            c = coll_msg(seq)
            msgs.append(wire(c))
            if rng.random() < 0.5:  # the same key again, new counters: what the reuse takes
                seq += 1
                msgs.append(encode(dataclasses.replace(c, seq=seq, bytes=rng.getrandbits(30))))
            if rng.random() < 0.5:  # a near miss: what the reuse must not take
                seq += 1
                msgs.append(encode(near_miss(c, seq)))
        while sum(map(len, msgs)) > 8000:  # one datagram
            msgs.pop()
        data = encode_batch(msgs)
        parts = batch_parts(data)
        assert parts is not None
        got: list[str] = []
        ents = coll_fast.batch(fast, data, parts, lambda p, got=got: general(fast, p, got),  # type: ignore[misc]
                               packed=True)
        want: list[str] = []
        wents = []
        for p in msgs:
            e = coll_fast.coll_packed_at(slow, p, 0, len(p), None) if p[3] == 3 else None
            if e is not None:
                wents.append(e)
            else:
                general(slow, p, want)
        reused += len(ents) - len({e[0] for e in ents})
        assert [(e[0], bytes(e[1])) for e in ents] == [(e[0], bytes(e[1])) for e in wents], it
        assert got == want, it
        for a in ("records_in", "records_out", "peers_dropped", "conflicts"):
            assert getattr(fast.counts, a) == getattr(slow.counts, a), (it, a)
        assert dict(fast.counts.dropped) == dict(slow.counts.dropped)
        assert fast.comm_ranks == slow.comm_ranks and fast.learned == slow.learned, it
    assert reused > 100 and fast.counts.records_out > 500  # the reuse and the fast path were exercised
