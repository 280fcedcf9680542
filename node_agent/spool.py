"""A bounded on-disk spool of telemetry batches, replayed in order.

While the controller is unreachable (or answers 503, as a non-leader replica may), each batch
the agent would have posted is appended here; when the controller answers again the batches
go out oldest first, before anything newer. A batch that does not fit in the size bound is
not written, and its records are counted as dropped (`Spool.dropped_records`): the records
already spooled are kept, in order, rather than overwritten.

Layout: ``seg-<n>.jsonl`` files of at most `SEGMENT_BYTES`, one batch per line written as
``<records> <json body>`` (a packed batch, node_agent.packed, as ``<records> P<base64>``), and
``cursor`` holding ``<segment> <offset>`` of the first batch
not yet delivered, and ``<skip>`` after them when the first records of that batch are (a batch
the controller refused is split, and its parts delivered one by one: `ack_part`). A segment is
deleted once delivered; a crash between a POST and the cursor update sends that batch (or
part) again, which the API makes harmless (a record with the same identity replaces the
earlier one). Writes are fsync'ed: the spool survives the agent's restart.

Blocking file I/O: the daemon calls it from a worker thread, never on its event loop.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from node_agent.packed import is_packed

SEGMENT_BYTES = 8 * 1024 * 1024
_SEG = re.compile(r"^seg-(\d{12})\.jsonl$")


@dataclass(frozen=True)
class Batch:
    """One spooled batch: where it is (to acknowledge it) and what to post: `body`'s records
    after the first `skip` (delivered already, `Spool.ack_part`), `records` of them."""

    segment: int
    offset: int
    end: int
    records: int
    body: bytes
    skip: int = 0


class Spool:
    def __init__(self, directory: str | Path, max_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.dropped_records = 0
        self.spooled_records = 0
        self._lock = threading.Lock()
        self._segments = sorted(int(m.group(1)) for p in self.dir.iterdir()
                                if (m := _SEG.match(p.name)))
        self._cursor = self._read_cursor()
        self._bytes = sum(self._path(s).stat().st_size for s in self._segments)
        self._pending_records = self._count_pending()

    # ---- state ----
    def _path(self, seg: int) -> Path:
        return self.dir / f"seg-{seg:012d}.jsonl"

    def _read_cursor(self) -> tuple[int, int, int]:
        try:
            seg, off, *skip = (int(v) for v in (self.dir / "cursor").read_text().split())
            if len(skip) > 1 or min(seg, off, *skip) < 0:
                raise ValueError
            return seg, off, (skip[0] if skip else 0)
        except (OSError, ValueError):
            return (self._segments[0] if self._segments else 0), 0, 0

    def _write_cursor(self) -> None:
        tmp = self.dir / "cursor.tmp"
        seg, off, skip = self._cursor
        tmp.write_text(f"{seg} {off} {skip}\n" if skip else f"{seg} {off}\n")
        os.replace(tmp, self.dir / "cursor")

    def _count_pending(self) -> int:
        n = 0
        for seg in self._segments:
            start = self._cursor[1] if seg == self._cursor[0] else 0
            if seg < self._cursor[0]:
                continue
            with self._path(seg).open("rb") as f:
                f.seek(start)
                for line in f:
                    head = line.split(b" ", 1)[0]
                    n += int(head) if head.isdigit() else 0
        return max(0, n - self._cursor[2])

    @property
    def pending_records(self) -> int:
        return self._pending_records

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def empty(self) -> bool:
        with self._lock:
            return self._pending_records == 0

    # ---- writing ----
    def append(self, body: bytes, records: int) -> bool:
        """Spool one batch; False (records counted as dropped) when it does not fit."""
        if is_packed(body):  # binary: base64 on its line
            body = b"P" + base64.b64encode(body)
        line = b"%d %s\n" % (records, body)
        with self._lock:
            if self._bytes + len(line) > self.max_bytes:
                self.dropped_records += records
                return False
            last = self._segments[-1] if self._segments else None
            if last is None or self._path(last).stat().st_size + len(line) > SEGMENT_BYTES:
                last = (last + 1) if last is not None else self._cursor[0]
                self._segments.append(last)
            fd = os.open(self._path(last), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._bytes += len(line)
            self._pending_records += records
            self.spooled_records += records
            return True

    # ---- replay ----
    def peek(self) -> Batch | None:
        """The oldest batch not yet delivered, or None."""
        with self._lock:
            while self._segments:
                seg = self._segments[0]
                off = self._cursor[1] if self._cursor[0] == seg else 0
                with self._path(seg).open("rb") as f:
                    f.seek(off)
                    line = f.readline()
                if line.endswith(b"\n"):
                    head, _, body = line[:-1].partition(b" ")
                    if body[:1] == b"P":
                        with contextlib.suppress(binascii.Error):  # (else sent as it is: refused)
                            body = base64.b64decode(body[1:], validate=True)
                    skip = self._cursor[2] if self._cursor[:2] == (seg, off) else 0
                    total = int(head) if head.isdigit() else 0
                    return Batch(seg, off, off + len(line), max(0, total - skip), body, skip)
                if len(self._segments) == 1 and line:
                    return None  # a torn last line: being written, or cut by a crash
                self._drop_segment(seg)
            return None

    def ack(self, batch: Batch) -> None:
        """The batch was delivered (or refused for good): move past it."""
        with self._lock:
            self._pending_records = max(0, self._pending_records - batch.records + self._done(batch))
            if not self._segments or self._segments[0] != batch.segment:
                return
            size = self._path(batch.segment).stat().st_size
            if batch.end >= size:
                self._drop_segment(batch.segment)
            else:
                self._cursor = (batch.segment, batch.end, 0)
                self._write_cursor()

    def ack_part(self, batch: Batch, done: int) -> None:
        """The first `done` of the batch's `records` were delivered (or refused for good): a
        later `peek` gives the batch without them, also after a restart."""
        with self._lock:
            if not self._segments or self._segments[0] != batch.segment or done <= self._done(batch):
                return
            done = min(done, batch.records)
            self._pending_records = max(0, self._pending_records - done + self._done(batch))
            self._cursor = (batch.segment, batch.offset, batch.skip + done)
            self._write_cursor()

    def _done(self, batch: Batch) -> int:
        """Of the batch's `records`, how many `ack_part` has taken already."""
        if self._cursor[:2] != (batch.segment, batch.offset):
            return 0
        return max(0, self._cursor[2] - batch.skip)

    def _drop_segment(self, seg: int) -> None:
        path = self._path(seg)
        try:
            self._bytes -= path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
        self._segments.remove(seg)
        self._cursor = (self._segments[0] if self._segments else seg + 1, 0, 0)
        self._write_cursor()
