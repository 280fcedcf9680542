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
from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from controller.domain import coll_packed

Entry = tuple[bytes, bytes]  # (shape JSON text, COLL message)
Pending = bytes | Entry  # a record: its JSON text, or a packed entry
CONTENT_TYPE = coll_packed.CONTENT_TYPE
MAGIC = coll_packed.MAGIC


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
