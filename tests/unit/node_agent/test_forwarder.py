"""Forwarding against a scripted controller: batches, the spool while it is away, replay in
order, and 422s narrowed down to the bad records (the real controller: tests/agent)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic_core import to_json

from controller.domain import coll_packed
from node_agent import packed
from node_agent.controller_client import Reply
from node_agent.forwarder import Forwarder, Health
from node_agent.metrics import AgentMetrics
from node_agent.spool import Spool


class ScriptedController:
    """Answers POSTs with `status`; 422 for any batch holding a record with seq < 0 (or more
    than `max_records` records). `answers` scripts the status of given calls (by number, from
    1); a call in `hold` never returns (the forwarder is stopped while it waits)."""

    def __init__(self) -> None:
        self.status = 202
        self.accepted: list[dict[str, Any]] = []
        self.calls = 0
        self.takes_packed = True
        self.packed_posts = 0
        self.max_body: int | None = None  # 413 past it
        self.max_records: int | None = None
        self.answers: dict[int, int] = {}
        self.hold: set[int] = set()
        self.held = asyncio.Event()

    async def post_collectives(self, body: bytes) -> Reply:
        self.calls += 1
        if self.calls in self.hold:
            self.held.set()
            await asyncio.Event().wait()
        status = self.answers.get(self.calls, self.status)
        if status != 202:
            return Reply(status, error="scripted")
        if self.max_body is not None and len(body) > self.max_body:
            return Reply(413, error="payload_too_large")
        if packed.is_packed(body):
            if not self.takes_packed:
                return Reply(415, error="scripted")
            self.packed_posts += 1
            header, start = coll_packed.decode_header(body)
            shapes = [coll_packed.shape(s) for s in header["shapes"]]
            doc = {"records": [packed.as_dict(r, True) for r in coll_packed.records(body, start, shapes)]}
        else:
            doc = json.loads(body)
        if any(r.get("seq", 0) < 0 for r in doc["records"]):
            return Reply(422, error="bad seq")
        if self.max_records is not None and len(doc["records"]) > self.max_records:
            return Reply(422, error="too many records")
        self.accepted.extend(doc["records"])
        return Reply(202, {"accepted": len(doc["records"])})


def forwarder(tmp_path: Path, ctl: ScriptedController, batch: int = 4, packing: bool = False,
              packed_batch: int | None = None) -> tuple[Forwarder, AgentMetrics]:
    m = AgentMetrics()
    f = Forwarder(ctl, Spool(tmp_path, 1 << 20), m, Health(), "host0", batch, 0.05, 0,  # type: ignore[arg-type]
                  lambda: False, lambda: packing, packed_batch_records=packed_batch)
    return f, m


def real(seq: int) -> dict[str, Any]:
    return {"job": "j", "comm": "0x7", "rank": 0, "nranks": 2, "op": "AllReduce", "seq": seq, "bytes": 8,
            "t_start_us": 10, "t_end_us": 20, "peers": [
                {"peer": 1, "dir": "send", "bytes": 8, "t_first_us": 11, "t_last_us": 19, "done": True}]}


def recs(a: int, b: int) -> list[bytes]:
    return [b'{"job":"j","seq":%d}' % i for i in range(a, b)]


def seqs(ctl: ScriptedController) -> list[int]:
    return [r["seq"] for r in ctl.accepted]


async def until(cond: Any, timeout_s: float = 10.0) -> None:
    """Wait for `cond()`, polling; fail after `timeout_s` (generous: a loaded machine)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_batches_spool_while_away_and_replay_in_order(tmp_path: Path) -> None:
    async def main() -> None:
        ctl = ScriptedController()
        f, m = forwarder(tmp_path, ctl)
        task = asyncio.create_task(f.run())
        f.add(recs(0, 6))
        await until(lambda: len(ctl.accepted) == 6)
        assert [r["seq"] for r in ctl.accepted] == list(range(6))
        ctl.status = 503  # a non-leader answers: keep everything, in order
        f.add(recs(6, 10))
        await until(lambda: m.records_spooled._value.get() == 4)
        f.add(recs(10, 13))
        await until(lambda: m.records_spooled._value.get() == 7)
        assert len(ctl.accepted) == 6
        ctl.status = 202
        f.add(recs(13, 15))  # newer than what waits in the spool: must come after it
        await until(lambda: len(ctl.accepted) == 15 and f.spool.empty())  # (acked just after its POST)
        assert [r["seq"] for r in ctl.accepted] == list(range(15))
        assert f.spool.empty() and m.records_forwarded._value.get() == 15
        task.cancel()

    asyncio.run(main())


def test_a_refused_batch_is_narrowed_to_its_bad_record(tmp_path: Path) -> None:
    async def main() -> None:
        ctl = ScriptedController()
        f, m = forwarder(tmp_path, ctl, batch=8)
        batch = recs(0, 8)
        batch[5] = b'{"job":"j","seq":-1}'
        f.add(batch)
        await f.flush()
        assert sorted(r["seq"] for r in ctl.accepted) == [0, 1, 2, 3, 4, 6, 7]
        assert m.records_dropped.labels("rejected")._value.get() == 1
        assert ctl.calls <= 1 + 2 * 3  # log2(8) rounds of halves

    asyncio.run(main())


def test_a_batch_over_the_body_cap_is_split_not_dropped(tmp_path: Path) -> None:
    """A 413 (the controller's body cap) splits the batch until its parts fit, live and from
    the spool; only a record over the cap alone is dropped."""
    async def main() -> None:
        ctl = ScriptedController()
        f, m = forwarder(tmp_path, ctl, batch=8)
        ctl.max_body = len(f._body(recs(0, 2))) + 1  # two records fit, three do not
        f.add(recs(0, 8))
        await f.flush()
        assert sorted(r["seq"] for r in ctl.accepted) == list(range(8))
        assert m.records_dropped.labels("rejected")._value.get() == 0
        ctl.status = 503  # away: the next batch goes to the spool whole
        task = asyncio.create_task(f.run())
        f.add(recs(8, 16))
        await until(lambda: f.spool.pending_records == 8)
        ctl.status = 202
        await until(lambda: len(ctl.accepted) == 16 and f.spool.empty())
        assert sorted(r["seq"] for r in ctl.accepted) == list(range(16))
        ctl.max_body = 10  # not even one record fits: that one is refused for good, counted
        f.add(recs(16, 17))
        await f.flush()  # (or the spool's replay, while the 503 is under a second old)
        await until(lambda: m.records_dropped.labels("rejected")._value.get() == 1 and f.spool.empty())
        task.cancel()

    asyncio.run(main())


def test_shutdown_spools_what_cannot_be_sent(tmp_path: Path) -> None:
    async def main() -> None:
        ctl = ScriptedController()
        ctl.status = 0  # nobody answers
        f, _ = forwarder(tmp_path, ctl)
        f.add(recs(0, 9))
        await f.drain(2.0)
        assert f.spool.pending_records == 9 and not f.pending

    asyncio.run(main())


def test_packed_batches_spool_replay_and_fall_back_to_json_on_415(tmp_path: Path) -> None:
    """Packed while the controller takes it (also through the spool, as posted); after a 415
    the same records go again as JSON, and later batches are JSON."""
    async def main() -> None:
        ctl = ScriptedController()
        f, m = forwarder(tmp_path, ctl, packing=True)
        task = asyncio.create_task(f.run())
        f.add_dicts([real(i) for i in range(4)])
        f.add([to_json(real(4))])  # JSON text of a record: converted into the packed batch
        await until(lambda: len(ctl.accepted) == 5)
        assert ctl.accepted == [real(i) for i in range(5)] and ctl.packed_posts == 2
        ctl.status = 503
        f.add_dicts([real(i) for i in range(5, 9)])
        await until(lambda: f.spool.pending_records == 4)
        ctl.status, ctl.takes_packed = 202, False  # back, without the packed form
        await until(lambda: f.spool.empty())
        f.add_dicts([real(i) for i in range(9, 12)])
        await until(lambda: len(ctl.accepted) == 12)
        assert ctl.accepted == [real(i) for i in range(12)] and ctl.packed_posts == 2
        assert not f.packing() and m.records_forwarded._value.get() == 12
        task.cancel()

    asyncio.run(main())


def test_a_record_json_cannot_carry_is_dropped_not_fatal_when_packed_falls_back_to_json(tmp_path: Path) -> None:
    """A packed entry with a counter out of the API's range (seq >= 2**62) has no JSON form:
    converting it after a 415, live or from the spool, raised and stopped the forwarder (and
    its replay loop) for good. It is counted as rejected; the rest of its batch goes on."""
    async def main() -> None:
        ctl = ScriptedController()
        ctl.takes_packed = False
        f, m = forwarder(tmp_path / "live", ctl, packing=True)
        task = asyncio.create_task(f.run())
        f.add([packed.entry(real(1)), packed.entry(real(2**62)), packed.entry(real(3))])
        await until(lambda: len(ctl.accepted) == 2)
        f.add([packed.entry(real(4))])
        await until(lambda: len(ctl.accepted) == 3 or task.done())
        assert not task.done()
        assert [r["seq"] for r in ctl.accepted] == [1, 3, 4]
        assert m.records_dropped.labels("rejected")._value.get() == 1
        task.cancel()

        ctl = ScriptedController()  # spooled packed while away; back without the packed form
        ctl.status = 503
        f, m = forwarder(tmp_path / "replay", ctl, packing=True)
        task = asyncio.create_task(f.run())
        f.add([packed.entry(real(1)), packed.entry(real(2**62)), packed.entry(real(3))])
        await until(lambda: f.spool.pending_records == 3)
        ctl.status, ctl.takes_packed = 202, False
        await until(lambda: f.spool.empty() or task.done())
        f.add([packed.entry(real(10))])
        await until(lambda: len(ctl.accepted) == 3 or task.done())
        assert not task.done()
        assert [r["seq"] for r in ctl.accepted] == [1, 3, 10] and f.spool.empty()
        assert m.records_dropped.labels("rejected")._value.get() == 1
        assert m.records_forwarded._value.get() == 3
        task.cancel()

    asyncio.run(main())


def test_packed_batches_take_packed_batch_records_and_json_ones_batch_records(tmp_path: Path) -> None:
    """Fewer, larger POSTs in the packed form (each POST costs the agent CPU whatever its
    size); JSON batches keep `batch_records`. A packed batch refused with 415 is sent again
    whole as JSON (the same records: it is not cut again); the batches after it are JSON."""
    async def main() -> None:
        ctl = ScriptedController()
        f, m = forwarder(tmp_path, ctl, batch=4, packing=True, packed_batch=10)
        f.add_dicts([real(i) for i in range(10)])
        await f.flush()
        assert ctl.packed_posts == 1 and ctl.calls == 1
        assert ctl.accepted == [real(i) for i in range(10)]
        ctl.takes_packed = False
        f.add_dicts([real(i) for i in range(10, 20)])
        await f.flush(everything=True)
        # a 415 to the packed batch of 10, the same 10 again as JSON; then JSON batches of 4
        assert ctl.calls == 1 + 2 and ctl.accepted == [real(i) for i in range(20)]
        f.add([to_json(real(i)) for i in range(20, 30)])
        await f.flush(everything=True)
        assert ctl.calls == 3 + 3 and ctl.accepted == [real(i) for i in range(30)]
        assert m.records_forwarded._value.get() == 30

    asyncio.run(main())


class RealController:
    """The controller's own checks of a batch: its body limit, then the packed decoder
    (`decode_collectives`: the per-batch peer and flow limits) or the JSON schema."""

    def __init__(self) -> None:
        self.posts: list[tuple[int, int, int, int, int]] = []  # (status, records, peers, flows, bytes)
        self.accepted: list[int] = []

    async def post_collectives(self, body: bytes) -> Reply:
        from controller.api.routes.telemetry import decode_collectives
        from controller.api.schemas.telemetry import CollectiveBatch

        if len(body) > coll_packed.MAX_BODY_BYTES:
            self.posts.append((413, 0, 0, 0, len(body)))
            return Reply(413, error="payload_too_large")
        try:
            if packed.is_packed(body):
                records: list[Any] = decode_collectives(body, lambda: None)[1]
            else:
                records = CollectiveBatch.model_validate_json(body).records
        except Exception as exc:  # a 422, as the route answers
            self.posts.append((422, 0, 0, 0, len(body)))
            return Reply(422, error=str(exc)[:300])
        self.posts.append((202, len(records), sum(len(r.peers) for r in records),
                           sum(len(p.flows or ()) for r in records for p in r.peers), len(body)))
        self.accepted += [r.seq for r in records]
        return Reply(202, {"accepted": len(records)})


def wide(seq: int, flows: int = 0, big: bool = False) -> dict[str, Any]:
    """A record of 8 peers (an AllToAll), each with `flows` flows (`big`: long numbers, and flows
    that differ from record to record, so each record has a shape of its own)."""
    t = 1_764_430_000_000_000 if big else 19
    return {"job": "j", "comm": "0x7", "rank": 0, "nranks": 16, "op": "AllToAll", "seq": seq, "bytes": 8,
            "t_start_us": 10, "t_end_us": t, "peers": [
                {"peer": p, "dir": "send", "bytes": 8, "t_first_us": 11, "t_last_us": t, "done": True, **(
                    {"flows": [{"sport": 50000 + i, "bytes": (seq * 64 if big else 0) + i, "t_last_us": t,
                                **({"net_us": t} if big else {})} for i in range(flows)]} if flows else {})}
                for p in range(1, 9)]}


def test_batches_are_cut_within_the_controllers_per_batch_limits(tmp_path: Path) -> None:
    """`packed_batch_records` (5000) records of 8 peers hold 40,000 peer entries, over the
    controller's 16,384 per batch: every batch was refused (422) and split. Batches are cut by
    the controller's own limits (peer entries, flow entries, body bytes), in both forms: every
    POST passes the real controller's checks, and no more POSTs are made than the limits need."""
    async def main(packing: bool) -> None:
        ctl = RealController()
        f = Forwarder(ctl, Spool(tmp_path / str(packing), 1 << 30), AgentMetrics(), Health(), "host0",  # type: ignore[arg-type]
                      10_000, 0.05, 0, lambda: False, lambda: packing, packed_batch_records=5000)
        # peers, flows, bytes bind (the last two in the packed form only: the JSON schema's
        # check of that many flows takes seconds; JSON's counts: test_measure_...)
        groups = [(2100, 0, False)] + [(560, 16, False), (200, 32, True)] * packing
        seq = 0
        for n, flows, big in groups:
            f.add_dicts([wide(s, flows, big) for s in range(seq, seq + n)])
            seq += n
        await f.flush(everything=True)
        assert ctl.accepted == list(range(seq))
        assert all(p[0] == 202 for p in ctl.posts), ctl.posts
        assert max(p[2] for p in ctl.posts) <= coll_packed.MAX_BATCH_PEERS
        assert max(p[3] for p in ctl.posts) <= coll_packed.MAX_BATCH_FLOWS
        # as full as each limit lets them be: peer entries, flow entries, bytes
        assert ctl.posts[0][1] == coll_packed.MAX_BATCH_PEERS // 8
        if packing:
            assert ctl.posts[1][3] == coll_packed.MAX_BATCH_FLOWS
            assert any(p[4] > 0.9 * coll_packed.MAX_BODY_BYTES for p in ctl.posts[2:]), ctl.posts
        assert len(ctl.posts) <= (6 if packing else 2), ctl.posts

    asyncio.run(main(True))
    asyncio.run(main(False))


def test_measure_counts_what_the_controller_counts(tmp_path: Path) -> None:
    """`packed.measure`: peer and flow entries as the controller counts them, the packed body's
    size exactly and the JSON one's at least, also for a mix of the two kinds of records."""
    recs_ = [wide(i, i % 3 * 4, i % 2 == 0) for i in range(40)] + [real(i) for i in range(40, 50)]
    peers = sum(len(r["peers"]) for r in recs_)
    flows = sum(len(p.get("flows", ())) for r in recs_ for p in r["peers"])
    ents: list[packed.Pending] = [packed.entry(r) for r in recs_]
    texts: list[packed.Pending] = [to_json(r) for r in recs_]
    mixed = ents[:25] + texts[25:]
    assert packed.measure(ents, True)[:2] == packed.measure(texts, False)[:2] == (peers, flows)
    assert packed.measure(mixed, True)[:2] == packed.measure(mixed, False)[:2] == (peers, flows)
    for form in (ents, texts, mixed):
        assert packed.measure(form, True)[2] >= len(packed.body("host0", form))
        assert packed.measure(form, False)[2] >= len(packed.json_body(b'"host0"', form, True))
    assert packed.measure(ents, True)[2] - len(packed.body("host0", ents)) < 300  # exact, but the head's slack


def test_a_split_stopped_midway_gives_its_unsent_parts_back_in_order(tmp_path: Path) -> None:
    """A batch refused (422) is split; the forwarder is stopped while a part's POST waits.
    Before, the parts not yet delivered were lost; they go back to the head of the pending
    records, in order, and at shutdown (`drain`, which stops the flush at its timeout) to the
    spool."""
    async def main() -> None:
        ctl = ScriptedController()
        ctl.max_records, ctl.hold = 2, {6}  # 8: 422; 0-3: 422; 0-1, 2-3 ok; 4-7: 422; 4-5 waits
        f, m = forwarder(tmp_path / "live", ctl, batch=8)
        f.add(recs(0, 8) + recs(8, 10))
        task = asyncio.create_task(f.flush())
        await ctl.held.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert seqs(ctl) == [0, 1, 2, 3] and f.pending == recs(4, 10)
        ctl.hold = set()
        await f.flush(everything=True)
        assert seqs(ctl) == list(range(10)) and m.records_dropped.labels("rejected")._value.get() == 0

        ctl = ScriptedController()
        ctl.max_records, ctl.hold = 2, {6}
        f, m = forwarder(tmp_path / "drain", ctl, batch=8)
        f.add(recs(0, 10))
        await f.drain(0.5)
        assert not f.pending and f.spool.pending_records + len(ctl.accepted) == 10
        spooled = []
        while (b := f.spool.peek()) is not None:
            spooled += [json.loads(r)["seq"] for r in Forwarder._records(b.body)]
            f.spool.ack(b)
        assert seqs(ctl) + spooled == list(range(10))
        assert m.records_dropped.labels("rejected")._value.get() == 0

    asyncio.run(main())


def test_a_split_that_meets_the_controller_away_spools_the_rest_in_order(tmp_path: Path) -> None:
    """A 503 to one part of a split batch: that part and every part after it go to the spool,
    and reach the controller after what it took already, in order (before, the next part was
    posted at once, ahead of the spooled one)."""
    async def main() -> None:
        ctl = ScriptedController()
        ctl.max_records, ctl.answers = 2, {4: 503}  # 8: 422; 0-3: 422; 0-1 ok; 2-3: 503
        f, m = forwarder(tmp_path, ctl, batch=8)
        task = asyncio.create_task(f.run())
        f.add(recs(0, 8))
        await until(lambda: len(ctl.accepted) == 8 and f.spool.empty())
        assert seqs(ctl) == list(range(8)) and m.records_spooled._value.get() == 6
        assert m.records_dropped.labels("rejected")._value.get() == 0
        task.cancel()

    asyncio.run(main())


def test_a_spooled_batch_split_keeps_its_undelivered_parts_in_the_spool(tmp_path: Path) -> None:
    """A spooled batch refused (422) on replay is split. Before, it left the spool before its
    parts were delivered: stopping the agent then, or the controller going away (503) in the
    middle, lost the rest. Now the spool's cursor moves past each part as it is delivered: what
    is not delivered stays at the spool's head, after a restart too; nothing is sent twice
    but a part whose POST was cut off."""
    async def main() -> None:
        ctl = ScriptedController()
        ctl.max_records, ctl.hold = 2, {6}  # 8: 422; 0-3: 422; 0-1, 2-3 ok; 4-7: 422; 4-5 waits
        f, m = forwarder(tmp_path / "stop", ctl, packing=True)
        f.spool.append(packed.body("host0", [packed.entry(real(i)) for i in range(8)]), 8)
        task = asyncio.create_task(f.run())
        await ctl.held.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await f.drain(1.0)
        assert seqs(ctl) == [0, 1, 2, 3] and f.spool.pending_records == 4
        ctl2 = ScriptedController()  # the agent again, on its spool
        ctl2.max_records = 2
        f2, m2 = forwarder(tmp_path / "stop", ctl2, packing=True)
        assert f2.spool.pending_records == 4
        task = asyncio.create_task(f2.run())
        await until(lambda: f2.spool.empty())
        assert seqs(ctl2) == [4, 5, 6, 7] and m2.records_forwarded._value.get() == 4
        task.cancel()

        ctl = ScriptedController()
        ctl.max_records, ctl.answers = 2, {4: 503}  # 8: 422; 0-3: 422; 0-1 ok; 2-3: 503, then 2-7
        f, m = forwarder(tmp_path / "away", ctl)
        f.spool.append(f._body(recs(0, 8)), 8)
        task = asyncio.create_task(f.run())
        await until(lambda: f.spool.empty())
        assert seqs(ctl) == list(range(8)) and m.records_forwarded._value.get() == 8
        assert m.records_dropped.labels("rejected")._value.get() == 0
        task.cancel()

    asyncio.run(main())


def test_a_replay_split_after_a_record_left_as_json_keeps_the_cursor_exact(tmp_path: Path) -> None:
    """A spooled packed batch meets a controller that takes JSON only (415) and one record at a
    time (422 splits), and one record has no JSON form (left out by `_body`). Before, the
    position of a split's first half was computed from its parent's end, which counted the
    record that had left: the cursor moved past seq 2 before it was delivered, and when the
    controller went away (503) right then, seq 2 was lost. Positions are carried now."""
    async def main() -> None:
        ctl = ScriptedController()
        ctl.takes_packed, ctl.max_records, ctl.answers = False, 1, {7: 503}
        f, m = forwarder(tmp_path, ctl, packing=True)
        f.spool.append(packed.body("host0", [packed.entry(real(2**62 if i == 3 else i)) for i in range(8)]), 8)
        task = asyncio.create_task(f.run())
        await until(lambda: f.spool.empty(), 20)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert sorted(set(seqs(ctl))) == [0, 1, 2, 4, 5, 6, 7]
        assert m.records_forwarded._value.get() == len(seqs(ctl))

    asyncio.run(main())


def test_a_spooled_batch_that_does_not_parse_is_dropped_and_counted_and_the_replay_goes_on(tmp_path: Path) -> None:
    """A spool line whose body is not what it says (here a packed body cut short, replayed to a
    controller that takes JSON only, so the agent must read it) used to raise out of the replay
    task and stop it for good: nothing spooled after it was ever sent. Now that batch is dropped
    and counted as `unreadable`, and the batches behind it go out."""
    async def main() -> None:
        ctl = ScriptedController()
        ctl.takes_packed = False
        f, m = forwarder(tmp_path, ctl, packing=True)
        f.spool.append(packed.body("host0", [packed.entry(real(i)) for i in range(3)])[:20], 3)
        f.spool.append(packed.body("host0", [packed.entry(real(i)) for i in range(3, 6)]), 3)
        task = asyncio.create_task(f.run())
        await until(lambda: f.spool.empty())
        assert seqs(ctl) == [3, 4, 5]
        assert m.records_dropped.labels("unreadable")._value.get() == 3
        assert not task.done()  # the forwarder (and its replay) still runs
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_drain_right_after_the_forwarder_is_cancelled_mid_split_keeps_the_order(tmp_path: Path) -> None:
    """The daemon's shutdown: cancel the forwarder's task (stopped inside a split, a part's
    POST waiting), add the records it releases, and `drain` at once. The cancelled task puts
    its unsent parts back at the head of `pending` only as it unwinds; `drain` waits for that
    before it flushes. Before, the drain sent what was behind those parts and returned, and the
    parts (4-7 here) came back to `pending` after it: lost at shutdown. (An HTTP client
    closes its connection as a cancellation unwinds: `SlowToCancel` takes 50 ms to.)"""
    class SlowToCancel(ScriptedController):
        async def post_collectives(self, body: bytes) -> Reply:
            try:
                return await super().post_collectives(body)
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)
                raise

    async def main() -> None:
        ctl = SlowToCancel()
        ctl.max_records, ctl.hold = 2, {6}  # 8: 422; 0-3: 422; 0-1, 2-3 ok; 4-7: 422; 4-5 waits
        f, _ = forwarder(tmp_path, ctl, batch=8)
        f.add(recs(0, 8))
        task = asyncio.create_task(f.run())
        await ctl.held.wait()
        ctl.hold = set()
        task.cancel()
        f.add(recs(8, 10))  # what the daemon's mapper releases at shutdown
        await f.drain(5.0)
        assert seqs(ctl) == list(range(10))
        assert task.done() and not f.pending and f.spool.empty()

    asyncio.run(main())


def test_a_replay_error_that_is_not_the_body_keeps_the_batch_and_the_replay(tmp_path: Path) -> None:
    """Only the parsing of a spooled body counts as `unreadable`: an error raised anywhere else
    in a replay (here the HTTP client, once) keeps the batch spooled, and the replay goes on
    and delivers it after the backoff."""
    class FailsOnce(ScriptedController):
        async def post_collectives(self, body: bytes) -> Reply:
            if self.calls == 0:
                self.calls += 1
                raise TypeError("a bug in the client")
            return await super().post_collectives(body)

    async def main() -> None:
        ctl = FailsOnce()
        f, m = forwarder(tmp_path, ctl)
        f.spool.append(f._body(recs(0, 4)), 4)
        task = asyncio.create_task(f.run())
        await until(lambda: f.spool.empty(), 20)
        assert seqs(ctl) == [0, 1, 2, 3]
        assert m.records_dropped.labels("unreadable")._value.get() == 0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
