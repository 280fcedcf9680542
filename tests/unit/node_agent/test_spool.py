"""The spool: bounded, in order, and still there after a restart."""

from __future__ import annotations

from pathlib import Path

import node_agent.spool as spool_mod
from controller.domain import coll_packed
from node_agent.spool import Spool


def drain(s: Spool) -> list[bytes]:
    out = []
    while (b := s.peek()) is not None:
        out.append(b.body)
        s.ack(b)
    return out


def test_batches_come_back_in_order_and_leave_no_files(tmp_path: Path) -> None:
    s = Spool(tmp_path, 1 << 20)
    for i in range(5):
        assert s.append(b'{"n": %d}' % i, 10)
    assert s.pending_records == 50 and not s.empty()
    assert drain(s) == [b'{"n": %d}' % i for i in range(5)]
    assert s.empty() and s.pending_records == 0 and s.size_bytes == 0
    assert not list(tmp_path.glob("seg-*"))


def test_a_packed_batch_comes_back_byte_for_byte(tmp_path: Path) -> None:
    body = coll_packed.MAGIC + bytes(range(256)) * 3  # binary, with newlines and spaces
    s = Spool(tmp_path, 1 << 20)
    assert s.append(body, 7) and s.append(b'{"n": 1}', 1)
    assert Spool(tmp_path, 1 << 20).pending_records == 8  # counted again after a restart
    assert drain(s) == [body, b'{"n": 1}']


def test_the_bound_keeps_what_is_spooled_and_counts_the_rest(tmp_path: Path) -> None:
    s = Spool(tmp_path, 100)
    assert s.append(b"x" * 40, 3)
    assert s.append(b"y" * 40, 4)
    assert not s.append(b"z" * 40, 5)  # would pass 100 bytes
    assert s.dropped_records == 5 and s.pending_records == 7
    assert drain(s) == [b"x" * 40, b"y" * 40]
    assert s.append(b"z" * 40, 5)  # room again once delivered


def test_a_restart_resumes_after_the_last_acknowledged_batch(tmp_path: Path) -> None:
    s = Spool(tmp_path, 1 << 20)
    for i in range(4):
        s.append(b"b%d" % i, 1)
    first = s.peek()
    assert first is not None
    s.ack(first)
    s2 = Spool(tmp_path, 1 << 20)  # a new agent process on the same directory
    assert s2.pending_records == 3
    assert drain(s2) == [b"b1", b"b2", b"b3"]


def test_segments_roll_over_and_a_torn_line_is_not_delivered(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(spool_mod, "SEGMENT_BYTES", 64)
    s = Spool(tmp_path, 1 << 20)
    for i in range(10):
        s.append(b"%02d" % i + b"-" * 20, 1)
    assert len(list(tmp_path.glob("seg-*"))) > 3
    assert [b[:2] for b in drain(s)] == [b"%02d" % i for i in range(10)]
    s.append(b"whole", 1)
    seg = sorted(tmp_path.glob("seg-*"))[-1]
    with seg.open("ab") as f:
        f.write(b"3 {\"torn")  # a crash in the middle of a write
    s3 = Spool(tmp_path, 1 << 20)
    b = s3.peek()
    assert b is not None and b.body == b"whole"
    s3.ack(b)
    assert s3.peek() is None


def test_a_batch_delivered_in_parts_resumes_after_the_last_part_also_after_a_restart(tmp_path: Path) -> None:
    """`ack_part`: the cursor moves past the first records of the oldest batch (a refused batch
    split and delivered part by part); `peek` gives the batch again with them to skip, also
    after a restart, and the counts follow."""
    s = Spool(tmp_path, 1 << 20)
    assert s.append(b'{"n": 0}', 8) and s.append(b'{"n": 1}', 3)
    b = s.peek()
    assert b is not None and (b.records, b.skip) == (8, 0)
    s.ack_part(b, 2)
    s.ack_part(b, 5)
    s.ack_part(b, 4)  # never backwards
    assert s.pending_records == 3 + 3
    again = Spool(tmp_path, 1 << 20)  # a restart
    assert again.pending_records == 6
    b2 = again.peek()
    assert b2 is not None and (b2.body, b2.records, b2.skip) == (b'{"n": 0}', 3, 5)
    again.ack_part(b2, 1)
    assert again.pending_records == 5 and (again.peek().records, again.peek().skip) == (2, 6)  # type: ignore[union-attr]
    again.ack(b2)  # the rest delivered: on to the next batch, which has nothing to skip
    assert again.pending_records == 3
    b3 = again.peek()
    assert b3 is not None and (b3.body, b3.records, b3.skip) == (b'{"n": 1}', 3, 0)
    assert drain(again) == [b'{"n": 1}'] and again.empty() and again.pending_records == 0
    assert Spool(tmp_path, 1 << 20).pending_records == 0
