"""The shim <-> node agent datagram codec (the Python side of nccl_shim/FORMAT.md).

The C shim inside NCCL and the node agent exchange small binary datagrams over a Unix datagram
socket (``C4_AGENT_SOCKET``). This module turns those bytes into frozen dataclasses and back,
and nothing else: no sockets, no clocks, no controller calls (the agent's service code does the
I/O). Only the standard library (``struct``, ``ipaddress``) is used, so the codec can be
imported anywhere. The byte layout is defined once in FORMAT.md; the C encoder
(``nccl_shim/src/c4_proto.c``) and this module are both tested against the same example files
in ``nccl_shim/examples/`` (hex bytes beside their JSON rendering).

Worked example: the shim asks for the ports of its fourth connection (index 3) from 10.0.0.2
to 10.0.1.2, and the agent answers with two flows carrying 75 % and 25 % of the bytes::

    >>> req = decode(bytes.fromhex(
    ...     "4334 0101 4000 0000 0700 0000 9210 0000 0100 0000 019c 3a7f"
    ...     "0000 0000 0000 0000 0000 ffff 0a00 0002 0000 0000 0000 0000"
    ...     "0000 ffff 0a00 0102 b812 0300 0000 1000".replace(" ", "")))
    >>> (req.local, req.remote, req.conn_index, req.remote_port)
    ('10.0.0.2', '10.0.1.2', 3, 4792)
    >>> reply = Assign.answer(req, version=12, flows=(Flow(50021, 750_000), Flow(50022, 250_000)))
    >>> decode(encode(reply)) == reply
    True

Malformed input (a wrong magic, a length that disagrees with the datagram, a count that does
not fit, a weight above 1) is an expected outcome on a socket anyone on the host can write
to, so ``decode`` returns a ``Malformed`` value naming the problem instead of raising.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

MAGIC = b"C4"
VERSION = 1
MAX_FLOWS = 16
MAX_PEERS = 8
PPM = 1_000_000

T_LOOKUP, T_ASSIGN, T_COLL, T_CONN, T_STATS = 1, 2, 3, 4, 5

_HEADER = struct.Struct("<2sBBHH")  # magic, version, type, total length, reserved
_LOOKUP = struct.Struct("<IIQ16s16sHHHH")
_ASSIGN = struct.Struct("<IIQ16s16sHBB")
_FLOW = struct.Struct("<HHI")
_COLL = struct.Struct("<QQQQQiiIBBBB")
_PEER = struct.Struct("<iBBHQQQ")
_CONN = struct.Struct("<Q16s16sHHBBHiIIIQQQQQ")
_SOCK = struct.Struct("<HHIQ")
_STATS = struct.Struct("<IIQQQQQQQ")

KINDS = {0: "tcp", 1: "roce"}
STATUSES = {0: "ok", 1: "unknown", 2: "error"}
DIRS = {0: "send", 1: "recv"}
OPS = {
    0: "Other",
    1: "AllReduce",
    2: "AllGather",
    3: "ReduceScatter",
    4: "Broadcast",
    5: "Reduce",
    6: "Send",
    7: "Recv",
    8: "AllToAll",
}
COLL_INFLIGHT, COLL_TRUNCATED = 0x1, 0x2
CONN_CLOSED = 0x1


def _code(table: dict[int, str], name: str) -> int:
    for code, n in table.items():
        if n == name:
            return code
    raise ValueError(f"unknown name {name!r}; expected one of {sorted(table.values())}")


def _addr_to_bytes(addr: str) -> bytes:
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv4Address):
        return ipaddress.IPv6Address(f"::ffff:{ip}").packed
    return ip.packed


def _addr_from_bytes(raw: bytes) -> str:
    ip = ipaddress.IPv6Address(raw)
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


@dataclass(frozen=True)
class Lookup:
    """Shim -> agent: which source ports should this connection (or RoCE QP) use?"""

    req_id: int
    pid: int
    comm_id: int
    local: str
    remote: str
    remote_port: int
    conn_index: int
    kind: Literal["tcp", "roce"] = "tcp"
    max_flows: int = MAX_FLOWS


@dataclass(frozen=True)
class Flow:
    """One socket (or QP) of a connection: its source port and its share in parts per million."""

    sport: int
    weight_ppm: int

    @property
    def weight(self) -> float:
        return self.weight_ppm / PPM


@dataclass(frozen=True)
class Assign:
    """Agent -> shim: the answer to a lookup (req_id echoed) or an unsolicited update (req_id 0)."""

    req_id: int
    version: int
    comm_id: int
    local: str
    remote: str
    conn_index: int
    status: Literal["ok", "unknown", "error"] = "ok"
    flows: tuple[Flow, ...] = ()

    @classmethod
    def answer(cls, req: Lookup, version: int, flows: tuple[Flow, ...]) -> Assign:
        """The reply to `req`: ``ok`` with `flows`, or ``unknown`` when there are none."""
        return cls(
            req_id=req.req_id,
            version=version,
            comm_id=req.comm_id,
            local=req.local,
            remote=req.remote,
            conn_index=req.conn_index,
            status="ok" if flows else "unknown",
            flows=tuple(flows[: min(req.max_flows, MAX_FLOWS)]),
        )

    @staticmethod
    def weights_to_ppm(weights: list[float]) -> list[int]:
        """API weights (floats summing to 1) as ppm integers that sum to exactly 1,000,000."""
        ppm = [round(w * PPM) for w in weights]
        if ppm:
            ppm[ppm.index(max(ppm))] += PPM - sum(ppm)
        return ppm


@dataclass(frozen=True)
class Peer:
    """Progress of one (peer rank, direction) of a collective on this rank."""

    peer: int
    dir: Literal["send", "recv"]
    done: bool
    bytes: int
    t_first_us: int  # 0 = no byte moved yet
    t_last_us: int


@dataclass(frozen=True)
class Coll:
    """One collective on one rank, keyed (comm_hash, op, seq); t_end_us 0 while in flight."""

    comm_hash: int
    seq: int
    bytes: int
    t_start_us: int
    t_end_us: int
    rank: int
    nranks: int
    pid: int
    op: str
    inflight: bool = False
    truncated: bool = False
    peers: tuple[Peer, ...] = ()


@dataclass(frozen=True)
class SockStat:
    sport: int
    weight_ppm: int
    bytes: int


@dataclass(frozen=True)
class Conn:
    """Progress of one shim connection (all of its sockets), sent every second and at close."""

    comm_id: int
    local: str
    remote: str
    remote_port: int
    conn_index: int
    dir: Literal["send", "recv"]
    peer_rank: int  # -1 until the first message names it
    pid: int
    closed: bool
    bytes: int
    msgs: int
    t_first_us: int
    t_last_us: int
    pending_since_us: int  # post time of the oldest unfinished request, 0 = idle
    socks: tuple[SockStat, ...] = ()


@dataclass(frozen=True)
class Stats:
    """The shim's counters: drops are how telemetry loss shows up (the shim never blocks)."""

    pid: int
    ring_drops: int
    send_drops: int
    lookups: int
    lookup_timeouts: int
    lookup_failures: int
    bind_fallbacks: int
    records_sent: int


@dataclass(frozen=True)
class Malformed:
    """A datagram that is not one whole, valid message; `reason` says what is wrong."""

    reason: str
    data: bytes = field(repr=False, default=b"")


Message = Lookup | Assign | Coll | Conn | Stats


def _header(msg_type: int, body: bytes) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, msg_type, _HEADER.size + len(body), 0) + body


def encode(msg: Message) -> bytes:
    """The datagram for `msg`. Raises ValueError for values the format cannot carry."""
    if isinstance(msg, Lookup):
        body = _LOOKUP.pack(
            msg.req_id,
            msg.pid,
            msg.comm_id,
            _addr_to_bytes(msg.local),
            _addr_to_bytes(msg.remote),
            msg.remote_port,
            msg.conn_index,
            _code(KINDS, msg.kind),
            msg.max_flows,
        )
        return _header(T_LOOKUP, body)
    if isinstance(msg, Assign):
        if len(msg.flows) > MAX_FLOWS:
            raise ValueError(f"{len(msg.flows)} flows; at most {MAX_FLOWS}")
        body = _ASSIGN.pack(
            msg.req_id,
            msg.version,
            msg.comm_id,
            _addr_to_bytes(msg.local),
            _addr_to_bytes(msg.remote),
            msg.conn_index,
            _code(STATUSES, msg.status),
            len(msg.flows),
        ) + b"".join(_FLOW.pack(f.sport, 0, f.weight_ppm) for f in msg.flows)
        return _header(T_ASSIGN, body)
    if isinstance(msg, Coll):
        if len(msg.peers) > MAX_PEERS:
            raise ValueError(f"{len(msg.peers)} peers; at most {MAX_PEERS}")
        flags = (COLL_INFLIGHT if msg.inflight else 0) | (COLL_TRUNCATED if msg.truncated else 0)
        body = _COLL.pack(
            msg.comm_hash,
            msg.seq,
            msg.bytes,
            msg.t_start_us,
            msg.t_end_us,
            msg.rank,
            msg.nranks,
            msg.pid,
            _code(OPS, msg.op),
            flags,
            len(msg.peers),
            0,
        ) + b"".join(
            _PEER.pack(
                p.peer, _code(DIRS, p.dir), int(p.done), 0, p.bytes, p.t_first_us, p.t_last_us
            )
            for p in msg.peers
        )
        return _header(T_COLL, body)
    if isinstance(msg, Conn):
        if len(msg.socks) > MAX_FLOWS:
            raise ValueError(f"{len(msg.socks)} sockets; at most {MAX_FLOWS}")
        body = _CONN.pack(
            msg.comm_id,
            _addr_to_bytes(msg.local),
            _addr_to_bytes(msg.remote),
            msg.remote_port,
            msg.conn_index,
            _code(DIRS, msg.dir),
            len(msg.socks),
            0,
            msg.peer_rank,
            msg.pid,
            CONN_CLOSED if msg.closed else 0,
            0,
            msg.bytes,
            msg.msgs,
            msg.t_first_us,
            msg.t_last_us,
            msg.pending_since_us,
        ) + b"".join(_SOCK.pack(s.sport, 0, s.weight_ppm, s.bytes) for s in msg.socks)
        return _header(T_CONN, body)
    if isinstance(msg, Stats):
        body = _STATS.pack(
            msg.pid,
            0,
            msg.ring_drops,
            msg.send_drops,
            msg.lookups,
            msg.lookup_timeouts,
            msg.lookup_failures,
            msg.bind_fallbacks,
            msg.records_sent,
        )
        return _header(T_STATS, body)
    raise TypeError(f"not a shim message: {type(msg).__name__}")


def _items(data: bytes, offset: int, count: int, item: struct.Struct) -> list[tuple[Any, ...]]:
    return [item.unpack_from(data, offset + i * item.size) for i in range(count)]


class _BadField(Exception):
    pass


def _name(table: dict[int, str], code: int, what: str) -> Any:
    if code not in table:
        raise _BadField(f"invalid {what} {code}")
    return table[code]


def _counted(
    data: bytes, fixed: int, count: int, limit: int, item: struct.Struct, what: str
) -> None:
    """The datagram must hold exactly `count` (<= `limit`) items after its fixed part."""
    if count > limit or len(data) != _HEADER.size + fixed + count * item.size:
        raise _BadField(f"claims {count} {what} in {len(data)} bytes")


def _decode_lookup(data: bytes) -> Lookup:
    if len(data) != _HEADER.size + _LOOKUP.size:
        raise _BadField("lookup has the wrong size")
    rid, pid, cid, la, ra, rport, idx, kind, maxf = _LOOKUP.unpack_from(data, _HEADER.size)
    return Lookup(
        rid, pid, cid, _addr_from_bytes(la), _addr_from_bytes(ra), rport, idx,
        _name(KINDS, kind, "kind"), maxf,
    )  # fmt: skip


def _decode_assign(data: bytes) -> Assign:
    if len(data) < _HEADER.size + _ASSIGN.size:
        raise _BadField("assign is truncated")
    rid, ver, cid, la, ra, idx, status, n = _ASSIGN.unpack_from(data, _HEADER.size)
    _counted(data, _ASSIGN.size, n, MAX_FLOWS, _FLOW, "flows")
    flows = tuple(
        Flow(sport, w) for sport, _, w in _items(data, _HEADER.size + _ASSIGN.size, n, _FLOW)
    )
    if any(f.weight_ppm > PPM for f in flows):
        raise _BadField("a weight above 1,000,000 ppm")
    return Assign(
        rid, ver, cid, _addr_from_bytes(la), _addr_from_bytes(ra), idx,
        _name(STATUSES, status, "status"), flows,
    )  # fmt: skip


def _decode_coll(data: bytes) -> Coll:
    if len(data) < _HEADER.size + _COLL.size:
        raise _BadField("collective record is truncated")
    chash, seq, nbytes, t0, t1, rank, nranks, pid, op, flags, n, _ = _COLL.unpack_from(
        data, _HEADER.size
    )
    _counted(data, _COLL.size, n, MAX_PEERS, _PEER, "peers")
    peers = tuple(
        Peer(peer, _name(DIRS, d, "dir"), bool(done), b, tf, tl)
        for peer, d, done, _, b, tf, tl in _items(data, _HEADER.size + _COLL.size, n, _PEER)
    )
    return Coll(
        chash, seq, nbytes, t0, t1, rank, nranks, pid, OPS.get(op, "Other"),
        bool(flags & COLL_INFLIGHT), bool(flags & COLL_TRUNCATED), peers,
    )  # fmt: skip


def _decode_conn(data: bytes) -> Conn:
    if len(data) < _HEADER.size + _CONN.size:
        raise _BadField("connection record is truncated")
    (cid, la, ra, rport, idx, d, n, _, peer, pid, flags, _, nbytes, msgs, tf, tl, pend) = (
        _CONN.unpack_from(data, _HEADER.size)
    )
    _counted(data, _CONN.size, n, MAX_FLOWS, _SOCK, "sockets")
    socks = tuple(
        SockStat(sport, w, b)
        for sport, _, w, b in _items(data, _HEADER.size + _CONN.size, n, _SOCK)
    )
    return Conn(
        cid, _addr_from_bytes(la), _addr_from_bytes(ra), rport, idx, _name(DIRS, d, "dir"),
        peer, pid, bool(flags & CONN_CLOSED), nbytes, msgs, tf, tl, pend, socks,
    )  # fmt: skip


def _decode_stats(data: bytes) -> Stats:
    if len(data) != _HEADER.size + _STATS.size:
        raise _BadField("stats record has the wrong size")
    pid, _, *counters = _STATS.unpack_from(data, _HEADER.size)
    return Stats(pid, *counters)


_DECODERS: dict[int, Callable[[bytes], Message]] = {
    T_LOOKUP: _decode_lookup,
    T_ASSIGN: _decode_assign,
    T_COLL: _decode_coll,
    T_CONN: _decode_conn,
    T_STATS: _decode_stats,
}


def decode(data: bytes) -> Message | Malformed:
    """The message in one datagram, or Malformed (never an exception) for anything invalid."""
    if len(data) < _HEADER.size:
        return Malformed("shorter than the 8-byte header", data)
    magic, version, msg_type, length, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return Malformed("bad magic", data)
    if version != VERSION:
        return Malformed(f"unsupported version {version}", data)
    if length != len(data):
        return Malformed(f"header says {length} bytes, datagram has {len(data)}", data)
    decoder = _DECODERS.get(msg_type)
    if decoder is None:
        return Malformed(f"unknown message type {msg_type}", data)
    try:
        return decoder(data)
    except _BadField as e:
        return Malformed(str(e), data)


def to_json(msg: Message) -> dict[str, Any]:
    """The JSON rendering used by the example files: the dataclass fields plus ``type``."""
    names = {Lookup: "lookup", Assign: "assign", Coll: "coll", Conn: "conn", Stats: "stats"}

    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if hasattr(v, "__dataclass_fields__"):
            return {k: plain(getattr(v, k)) for k in v.__dataclass_fields__}
        return v

    return {"type": names[type(msg)], **plain(msg)}


def collective_record(coll: Coll, job: str) -> dict[str, Any]:
    """API.md's ``POST /v1/telemetry/collectives`` record for `coll` (the agent knows the job).

    In-flight values the shim sends as 0 become null, as the API asks.
    """
    return {
        "job": job,
        "comm": f"{coll.comm_hash:#x}",
        "rank": coll.rank,
        "nranks": coll.nranks,
        "op": coll.op,
        "seq": coll.seq,
        "bytes": coll.bytes,
        "t_start_us": coll.t_start_us,
        "t_end_us": coll.t_end_us or None,
        "peers": [
            {
                "peer": p.peer,
                "dir": p.dir,
                "bytes": p.bytes,
                "t_first_us": p.t_first_us or None,
                "t_last_us": p.t_last_us or None,
                "done": p.done,
            }
            for p in coll.peers
        ],
    }
