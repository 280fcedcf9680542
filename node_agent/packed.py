"""Telemetry batches in the packed form (controller.domain.coll_packed, docs/telemetry-packed.md)
and the conversions between the two forms the forwarder needs.

A pending record is either its JSON text (the general path, or a controller without the
packed form) or a packed entry: (its shape's JSON text, the shim's COLL message as received),
which is what `coll_fast` makes of the common record with no per-record formatting. A batch
goes out packed when the controller accepts it, else as JSON; each record is converted to the
batch's form where it is not in it yet (the rare case: a general-path record in a packed batch;
a packed one when the controller stopped accepting the form).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import accumulate
from operator import add, itemgetter
from typing import Any

from pydantic_core import to_json

from controller.domain import coll_packed

Entry = tuple[bytes, bytes]  # (shape JSON text, COLL message)
Pending = bytes | Entry  # a record: its JSON text, or a packed entry
CONTENT_TYPE = coll_packed.CONTENT_TYPE
MAGIC = coll_packed.MAGIC
# What the controller takes in one batch (its own constants: controller.domain.coll_packed, which
# api.schemas.telemetry and api.routes.telemetry validate with): `fit` cuts batches by them, with
# a margin on the body size for the estimate of records converted between the forms.
MAX_RECORDS = coll_packed.MAX_RECORDS
MAX_PEERS = coll_packed.MAX_BATCH_PEERS
MAX_FLOWS = coll_packed.MAX_BATCH_FLOWS
MAX_BYTES = coll_packed.MAX_BODY_BYTES - (256 << 10)
_PEER_KEY, _FLOW_KEY = b'"peer":', b'"sport":'  # one per peer entry, one per flow entry, in either text
_SHAPE, _MESSAGE = itemgetter(0), itemgetter(1)
_HEAD_BYTES = 256  # a batch's head and host, at most (the host's name: 200 characters)


def is_packed(body: bytes) -> bool:
    return body[:4] == MAGIC


def entry(rec: dict[str, Any]) -> Entry:
    """A JSON-form record as a packed entry (the same record once decoded)."""
    peers = []
    for p in rec["peers"]:
        sp: dict[str, Any] = {"peer": p["peer"], "dir": p["dir"], "done": p["done"]}
        if p.get("net_us") is not None:
            sp["net"] = True
        if p.get("flows"):
            sp["flows"] = p["flows"]
        peers.append(sp)
    doc = {"job": rec["job"], "comm": rec["comm"], "rank": rec["rank"], "nranks": rec["nranks"],
           "op": rec["op"], "peers": peers}
    if rec.get("truncated"):
        doc["truncated"] = True
    return to_json(doc), coll_packed.message(
        rec["seq"], rec["bytes"], rec["t_start_us"], rec["t_end_us"],
        [(p["bytes"], p["t_first_us"], p["t_last_us"], p.get("net_us")) for p in rec["peers"]])


def as_dict(r: coll_packed.Record, truncated_ok: bool) -> dict[str, Any]:
    """A decoded record as the agent's JSON form has it (`truncated` where the controller
    accepts that field)."""
    peers = []
    for p in r.peers:
        d: dict[str, Any] = {"peer": p.peer, "dir": p.dir, "bytes": p.bytes, "t_first_us": p.t_first_us,
                             "t_last_us": p.t_last_us, "done": p.done}
        if p.net_us is not None:
            d["net_us"] = p.net_us
        if p.flows:
            d["flows"] = [_flow(f) for f in p.flows]
        peers.append(d)
    out: dict[str, Any] = {"job": r.job, "comm": r.comm, "rank": r.rank, "nranks": r.nranks, "op": r.op,
                           "seq": r.seq, "bytes": r.bytes, "t_start_us": r.t_start_us,
                           "t_end_us": r.t_end_us, "peers": peers}
    if r.truncated and truncated_ok:
        out["truncated"] = True
    return out


def _flow(f: coll_packed.Flow) -> dict[str, Any]:
    d: dict[str, Any] = {"sport": f.sport, "bytes": f.bytes, "t_last_us": f.t_last_us}
    if f.net_us is not None:
        d["net_us"] = f.net_us
    return d


def record_json(e: Entry, truncated_ok: bool) -> bytes:
    """A packed entry as its record's JSON text."""
    shape = coll_packed.shape(json.loads(e[0]))
    (rec,) = coll_packed.records(b"\0\0" + e[1], 0, [shape])
    return to_json(as_dict(rec, truncated_ok))


def convertible(e: Entry, truncated_ok: bool) -> bool:
    """Whether a packed entry can be written as JSON (its counters within the API's ranges)."""
    try:
        record_json(e, truncated_ok)
    except coll_packed.PackedError:
        return False
    return True


def body(host: str, records: list[Pending]) -> bytes:
    """A packed batch of these records."""
    return coll_packed.encode(host, [r if isinstance(r, tuple) else entry(json.loads(r))
                                     for r in records])


def json_body(host_json: bytes, records: list[Pending], truncated_ok: bool,
              on_drop: Callable[[], None] | None = None) -> bytes:
    """A JSON batch of these records. A packed entry the controller's rules refuse (a counter
    out of range) is left out and `on_drop` called for it: it cannot be written as JSON, and
    one such record must not stop the batch, the forwarder or the spool's replay."""
    try:
        text = b",".join(records)  # type: ignore[arg-type]
    except TypeError:  # some are packed entries
        parts = []
        for r in records:
            if isinstance(r, bytes):
                parts.append(r)
                continue
            try:
                parts.append(record_json(r, truncated_ok))
            except coll_packed.PackedError:
                if on_drop is not None:
                    on_drop()
        text = b",".join(parts)
    return b'{"host":%s,"records":[%s]}' % (host_json, text)


def entries(body: bytes) -> list[Entry]:
    """A packed batch's records as entries (to split a refused batch)."""
    header, off = coll_packed.decode_header(body)
    shapes = [to_json(s) for s in header["shapes"]]
    out: list[Entry] = []
    while off < len(body):
        s = body[off] | body[off + 1] << 8
        size = body[off + 6] | body[off + 7] << 8  # the message's own length (FORMAT.md header)
        out.append((shapes[s], body[off + 2:off + 2 + size]))
        off += 2 + size
    return out


def to_json_body(body: bytes, host_json: bytes, truncated_ok: bool,
                 on_drop: Callable[[], None] | None = None) -> bytes:
    """A packed batch (spooled, or refused with 415) as the same batch in JSON."""
    return json_body(host_json, list(entries(body)), truncated_ok, on_drop)


def measure(records: list[Pending], packing: bool) -> tuple[int, int, int]:
    """(peer entries, flow entries, body bytes) of a batch of these records, in the packed form
    (`packing`) or JSON: the counts exact, the bytes exact for packed entries in a packed batch
    and an upper bound for a record converted to the other form. In C-level passes, not per
    record in Python, for packed entries (the forwarder measures every batch it cuts)."""
    return _measure(list(map(_SHAPE, records)), records, packing)[0]


def fit(records: list[Pending], limit: int, packing: bool) -> int:
    """How many of the first `records` (at most `limit`) one batch may take: within the
    controller's peer, flow and body limits, at least one. Most batches are within them
    (`measure`); one that is not is cut where the running total of what it passes (peer
    entries, flow entries or bytes) first passes the limit."""
    n = min(limit, MAX_RECORDS, len(records))
    if n <= 1:
        return max(n, 0)
    head = records[:n]
    shapes = list(map(_SHAPE, head))
    (peers, flows, size), each = _measure(shapes, head, packing)
    cuts = [n]
    for total, cap, i in ((peers, MAX_PEERS, 0), (flows, MAX_FLOWS, 1), (size, MAX_BYTES, 2)):
        if total > cap:
            cuts.append(bisect_right(list(accumulate(each(i))), cap - (_HEAD_BYTES if i == 2 else 0)))
    return max(1, min(cuts))


def _measure(shapes: list[Any], records: list[Pending], packing: bool
             ) -> tuple[tuple[int, int, int], Callable[[int], Iterable[int]]]:
    """`measure`'s totals of `records` (whose first items are `shapes`), and a function giving,
    per record in order, its peer entries (0), flow entries (1) or the bytes it adds (2)."""
    counts = Counter(shapes)
    if any(type(s) is int for s in counts):  # JSON text among them (its first byte): per record
        weights = _weights(records, packing)
        return (sum(weights[0]), sum(weights[1]), _HEAD_BYTES + sum(weights[2])), weights.__getitem__
    # A packed entry's message is the shim's COLL message, whose size its peer count sets
    # (FORMAT.md); the shape's text is in the header once (packed) or in every record (JSON,
    # where the message's counters take at most thrice its bytes as text).
    info: dict[bytes, tuple[int, int, int, int]] = {}
    peers = flows = 0
    size = _HEAD_BYTES
    for shape, k in counts.items():
        p, f = shape.count(_PEER_KEY), shape.count(_FLOW_KEY)
        message = coll_packed.SHIM_HEADER.size + coll_packed.COLL.size + p * coll_packed.PEER.size
        text = len(shape) + 1
        info[shape] = each = (p, f, 2 + message, text) if packing else (p, f, text + 3 * message, 0)
        peers += k * p
        flows += k * f
        size += k * each[2] + text * packing

    def per_record(i: int) -> Iterable[int]:
        got = map(info.__getitem__, shapes)
        if i < 2 or not packing:
            return map(itemgetter(i), got)
        first = dict(zip(reversed(shapes), range(len(shapes) - 1, -1, -1), strict=True))
        texts = [0] * len(shapes)  # a shape's text with the first record that uses it
        for shape, at in first.items():
            texts[at] = info[shape][3]
        return map(add, texts, map(itemgetter(2), got))

    return (peers, flows, size), per_record


def _weights(records: list[Pending], packing: bool) -> tuple[list[int], list[int], list[int]]:
    """Per record: its peer entries, flow entries and the bytes it adds to the body at most,
    for a batch with JSON text among its records (in a packed batch a shape's text counts
    once, with its first record; JSON text counts as itself, which its packed entry is not
    larger than)."""
    out: tuple[list[int], list[int], list[int]] = ([], [], [])
    seen: set[bytes] = set()
    for r in records:
        if isinstance(r, bytes):
            text, size = r, len(r) + 1
        else:
            p = r[0].count(_PEER_KEY)
            message = coll_packed.SHIM_HEADER.size + coll_packed.COLL.size + p * coll_packed.PEER.size
            if packing:
                text, size = r[0], (0 if r[0] in seen else len(r[0]) + 1) + 2 + message
                seen.add(r[0])
            else:
                text, size = r[0], len(r[0]) + 1 + 3 * message
        out[0].append(text.count(_PEER_KEY))
        out[1].append(text.count(_FLOW_KEY))
        out[2].append(size)
    return out
