"""The packed form of a collective-record batch (`POST /v1/telemetry/collectives` with
`Content-Type: application/x-c4-collectives`), beside the JSON one: what the node agent sends
so that it does next to no Python work per record (docs/telemetry-packed.md).

A batch is a small JSON header naming the *shapes* of its records (everything a record's text
would hold besides its counters: the job, communicator, job ranks, direction, completion and
per-flow progress, as the agent mapped them) and, per record, the index of its shape followed
by the shim's own COLL message (nccl_shim/FORMAT.md), byte for byte as the shim sent it. The
controller takes only the counters from the message: `seq`, `bytes`, `t_start_us`,
`t_end_us` and per peer `bytes`, `t_first_us`, `t_last_us`, `net_us`, with the rules the
agent's JSON applies (`t_end_us` null unless at or after the start; a peer's times null
unless it moved bytes and `t_last_us >= t_first_us`; `net_us` only where the shape says).

Pure: bytes in, values out. `decode_header` and `records` raise `PackedError` naming the
field; nothing is returned for a batch with any bad record. `encode` is the agent's side.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

CONTENT_TYPE = "application/x-c4-collectives"
MAGIC = b"C4CP"
VERSION = 1
HEAD = struct.Struct("<4sB3xI")  # magic, version, 3 reserved, header length
MAX_HEADER_BYTES = 4 << 20
# What one batch may hold, in either form (api.schemas.telemetry validates the JSON form with these,
# api.routes.telemetry the packed one; the node agent cuts its batches by them): records, peer
# entries over all records, flow entries over all peers; and the route's body limit
# (`C4_MAX_BODY_BYTES` may lower it: then a 413, which the agent splits).
MAX_RECORDS = 10_000
MAX_BATCH_PEERS = 16_384
MAX_BATCH_FLOWS = 65_536
MAX_BODY_BYTES = 4 << 20
LIMIT = 2**62  # counters and times: as the JSON form's ranges

# The shim's COLL message (nccl_shim/FORMAT.md): header, body, then `npeers` peer entries.
SHIM_MAGIC, SHIM_VERSION, T_COLL = b"C4", 2, 3
SHIM_HEADER = struct.Struct("<2sBBHH")  # magic, version, type, total length, reserved
COLL = struct.Struct("<QQQQQiiIiBBBB")  # comm hash, seq, bytes, t_start, t_end, rank, nranks,
# pid, job rank, op, flags, npeers, reserved
PEER = struct.Struct("<iiBBHIQQQQ")  # peer, peer job rank, dir, done, flags, reserved, bytes,
# t_first, t_last, net_us
MAX_PEERS = 8
_WHOLE = [struct.Struct(SHIM_HEADER.format + COLL.format[1:] + PEER.format[1:] * k)
          for k in range(MAX_PEERS + 1)]
_P0 = 5 + 13  # index of the first peer's first field in a `_WHOLE` unpack
_INDEX = [i.to_bytes(2, "little") for i in range(MAX_RECORDS + 1)]


class PackedError(ValueError):
    """A packed batch that is not one; `loc` names the field (as a 422's `loc`)."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc, self.msg = loc, msg


class Flow(NamedTuple):
    sport: int
    bytes: int
    t_last_us: int | None
    net_us: int | None = None


class ShapePeer(NamedTuple):
    peer: int
    dir: str
    done: bool
    net: bool
    flows: tuple[Flow, ...]


class Shape(NamedTuple):
    """What a record's JSON holds besides its counters (validated by the caller)."""

    job: str
    comm: str
    rank: int
    nranks: int
    op: str
    peers: tuple[ShapePeer, ...]
    truncated: bool = False


class Peer(NamedTuple):
    peer: int
    dir: str
    bytes: int
    t_first_us: int | None
    t_last_us: int | None
    done: bool
    net_us: int | None
    flows: tuple[Flow, ...]


class Record(NamedTuple):
    """One decoded record: the attributes of a JSON record (services.telemetry_codec.RecordIn),
    plus `truncated`."""

    job: str
    comm: str
    rank: int
    nranks: int
    op: str
    seq: int
    bytes: int
    t_start_us: int
    t_end_us: int | None
    peers: tuple[Peer, ...]
    truncated: bool


def encode(host: str, entries: Sequence[tuple[bytes, bytes]]) -> bytes:
    """A packed batch of `entries`, each (its shape's JSON text, its COLL message). Shapes are
    listed once per distinct text, in order of first use."""
    index: dict[bytes, bytes] = {}
    parts: list[bytes] = []
    add = parts.append
    for shape, message in entries:
        i = index.get(shape)
        if i is None:
            i = index[shape] = _INDEX[len(index)]
        add(i)
        add(message)
    header = b'{"host":%s,"shapes":[%s]}' % (json.dumps(host).encode(), b",".join(index))
    return HEAD.pack(MAGIC, VERSION, len(header)) + header + b"".join(parts)


def decode_header(body: bytes) -> tuple[dict[str, Any], int]:
    """The header document and where the records start."""
    if len(body) < HEAD.size:
        raise PackedError((), f"shorter than the {HEAD.size}-byte head")
    magic, version, size = HEAD.unpack_from(body)
    if magic != MAGIC:
        raise PackedError(("magic",), f"the body does not start with {MAGIC.decode()}")
    if version != VERSION:
        raise PackedError(("version",), f"unsupported version {version} (this controller reads {VERSION})")
    if body[5:8] != b"\0\0\0":
        raise PackedError(("reserved",), "reserved head bytes are not zero")
    if size > MAX_HEADER_BYTES or HEAD.size + size > len(body):
        raise PackedError(("header",), f"a header of {size} bytes does not fit in the body")
    try:
        doc = json.loads(body[HEAD.size:HEAD.size + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PackedError(("header",), f"the header is not UTF-8 JSON: {exc}") from None
    except RecursionError:  # (nested too deep: the JSON path answers the same 422)
        raise PackedError(("header",), "the header is nested too deeply") from None
    if not isinstance(doc, dict):
        raise PackedError(("header",), "the header is not a JSON object")
    return doc, HEAD.size + size


def shape(doc: dict[str, Any]) -> Shape:
    """A shape from its JSON document, unchecked (the agent's own shapes; the controller
    validates its input first, api.schemas.telemetry.CollectiveShape)."""
    return Shape(doc["job"], doc["comm"], doc["rank"], doc["nranks"], doc["op"], tuple(
        ShapePeer(p["peer"], p["dir"], p["done"], p.get("net", False), tuple(
            Flow(f["sport"], f["bytes"], f.get("t_last_us"), f.get("net_us")) for f in p.get("flows", ())))
        for p in doc["peers"]), doc.get("truncated", False))


def records(body: bytes, start: int, shapes: Sequence[Shape]) -> list[Record]:
    """The records from `start` to the body's end (see the module for the rules)."""
    out: list[Record] = []
    n, off, count = len(body), start, len(shapes)
    add = out.append
    while off < n:
        i = len(out)
        if i >= MAX_RECORDS:
            raise PackedError(("records",), f"more than {MAX_RECORDS} records")
        if n - off < 2:
            raise PackedError(("records", i), "the body ends inside a record")
        s = body[off] | body[off + 1] << 8
        if s >= count:
            raise PackedError(("records", i, "shape"), f"shape {s} is not one of the header's {count}")
        sh = shapes[s]
        k = len(sh.peers)
        st = _WHOLE[k]
        if n - off - 2 < st.size:
            raise PackedError(("records", i), f"the body ends inside a record of {k} peers ({st.size} bytes)")
        v = st.unpack_from(body, off + 2)
        magic, version, kind, length, reserved = v[:5]
        if magic != SHIM_MAGIC or version != SHIM_VERSION or kind != T_COLL or reserved:
            raise PackedError(("records", i), "not a COLL message of FORMAT.md version 2")
        if length != st.size or v[16] != k:
            raise PackedError(("records", i, "npeers"),
                              f"{v[16]} peers in a message of {length} bytes; its shape has {k}")
        seq, size, t0, t1 = v[6], v[7], v[8], v[9]
        if seq >= LIMIT:
            raise PackedError(("records", i, "seq"), f"seq {seq} is not below 2**62")
        if size >= LIMIT:
            raise PackedError(("records", i, "bytes"), f"bytes {size} is not below 2**62")
        if not 0 < t0 < LIMIT:
            raise PackedError(("records", i, "t_start_us"), f"t_start_us {t0} is not in (0, 2**62)")
        if t1 >= LIMIT:
            raise PackedError(("records", i, "t_end_us"), f"t_end_us {t1} is not below 2**62")
        peers = []
        b = _P0
        for j, sp in enumerate(sh.peers):
            pb, tf, tl, net = v[b + 6], v[b + 7], v[b + 8], v[b + 9]
            if pb >= LIMIT or tf >= LIMIT or tl >= LIMIT or net >= LIMIT:
                raise PackedError(("records", i, "peers", j), "a counter is not below 2**62")
            moved = pb > 0 and tf > 0 and tl >= tf
            peers.append(Peer(sp.peer, sp.dir, pb, tf if moved else None, tl if moved else None, sp.done,
                              net if sp.net else None, sp.flows))
            b += 10
        add(Record(sh.job, sh.comm, sh.rank, sh.nranks, sh.op, seq, size, t0,
                   t1 if t1 and t1 >= t0 else None, tuple(peers), sh.truncated))
        off += 2 + st.size
    return out


def message(seq: int, size: int, t_start_us: int, t_end_us: int | None,
            peers: Sequence[tuple[int, int | None, int | None, int | None]]) -> bytes:
    """A COLL message carrying these counters (peers: bytes, t_first, t_last, net_us), for a
    record that did not come from the shim as one (the agent's general path); the fields the
    controller does not read are zero."""
    k = len(peers)
    flat: list[Any] = [SHIM_MAGIC, SHIM_VERSION, T_COLL, _WHOLE[k].size, 0,
                       0, seq, size, t_start_us, t_end_us or 0, 0, 0, 0, 0, 0, 0, k, 0]
    for pb, tf, tl, net in peers:
        flat += [0, 0, 0, 0, 0, 0, pb, tf or 0, tl or 0, net or 0]
    return _WHOLE[k].pack(*flat)
