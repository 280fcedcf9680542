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
    """Answers POSTs with `status()`; 422 for any batch holding a record with seq < 0."""

    def __init__(self) -> None:
        self.status = 202
        self.accepted: list[dict[str, Any]] = []
        self.calls = 0
        self.takes_packed = True
        self.packed_posts = 0
        self.max_body: int | None = None  # 413 past it

    async def post_collectives(self, body: bytes) -> Reply:
        self.calls += 1
        if self.status != 202:
            return Reply(self.status, error="scripted")
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


def test_batches_spool_while_away_and_replay_in_order(tmp_path: Path) -> None:
    async def main() -> None:
        ctl = ScriptedController()
        f, m = forwarder(tmp_path, ctl)
        task = asyncio.create_task(f.run())
        f.add(recs(0, 6))
        await asyncio.sleep(0.2)
        assert [r["seq"] for r in ctl.accepted] == list(range(6))
        ctl.status = 503  # a non-leader answers: keep everything, in order
        f.add(recs(6, 10))
        await asyncio.sleep(0.2)
        f.add(recs(10, 13))
        await asyncio.sleep(0.2)
        assert len(ctl.accepted) == 6 and m.records_spooled._value.get() == 7
        ctl.status = 202
        f.add(recs(13, 15))  # newer than what waits in the spool: must come after it
        for _ in range(100):
            await asyncio.sleep(0.05)
            if len(ctl.accepted) == 15 and f.spool.empty():  # (acked just after its POST)
                break
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
        await asyncio.sleep(0.3)
        assert f.spool.pending_records == 8
        ctl.status = 202
        for _ in range(100):
            await asyncio.sleep(0.05)
            if len(ctl.accepted) == 16:
                break
        assert sorted(r["seq"] for r in ctl.accepted) == list(range(16))
        ctl.max_body = 10  # not even one record fits: that one is refused for good, counted
        f.add(recs(16, 17))
        await f.flush()  # (or the spool's replay, while the 503 is under a second old)
        for _ in range(100):
            if m.records_dropped.labels("rejected")._value.get():
                break
            await asyncio.sleep(0.05)
        assert m.records_dropped.labels("rejected")._value.get() == 1 and f.spool.empty()
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
        await asyncio.sleep(0.2)
        assert ctl.accepted == [real(i) for i in range(5)] and ctl.packed_posts == 2
        ctl.status = 503
        f.add_dicts([real(i) for i in range(5, 9)])
        await asyncio.sleep(0.2)
        assert f.spool.pending_records == 4
        ctl.status, ctl.takes_packed = 202, False  # back, without the packed form
        for _ in range(100):
            await asyncio.sleep(0.05)
            if f.spool.empty():
                break
        f.add_dicts([real(i) for i in range(9, 12)])
        await asyncio.sleep(0.2)
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
        await asyncio.sleep(0.3)
        f.add([packed.entry(real(4))])
        await asyncio.sleep(0.3)
        assert not task.done()
        assert [r["seq"] for r in ctl.accepted] == [1, 3, 4]
        assert m.records_dropped.labels("rejected")._value.get() == 1
        task.cancel()

        ctl = ScriptedController()  # spooled packed while away; back without the packed form
        ctl.status = 503
        f, m = forwarder(tmp_path / "replay", ctl, packing=True)
        task = asyncio.create_task(f.run())
        f.add([packed.entry(real(1)), packed.entry(real(2**62)), packed.entry(real(3))])
        await asyncio.sleep(0.3)
        ctl.status, ctl.takes_packed = 202, False
        await asyncio.sleep(0.8)
        f.add([packed.entry(real(10))])
        await asyncio.sleep(0.8)
        assert not task.done()
        assert [r["seq"] for r in ctl.accepted] == [1, 3, 10] and f.spool.empty()
        assert m.records_dropped.labels("rejected")._value.get() == 1
        assert m.records_forwarded._value.get() == 3
        task.cancel()

    asyncio.run(main())


def test_packed_batches_take_packed_batch_records_and_json_ones_batch_records(tmp_path: Path) -> None:
    """Fewer, larger POSTs in the packed form (each POST costs the agent CPU whatever its
    size); JSON batches keep `batch_records`, also for the same records after a 415."""
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
