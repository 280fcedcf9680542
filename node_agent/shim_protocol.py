"""The shim <-> node agent datagram codec (the Python side of nccl_shim/FORMAT.md).

The C shim inside NCCL and the node agent exchange small binary datagrams over a Unix datagram
socket (``C4_AGENT_SOCKET``). This module turns those bytes into frozen dataclasses and back,
and nothing else: no sockets, no clocks, no controller calls (the agent's service code does the
I/O). Only the standard library (``struct``, ``ipaddress``) is used, so the codec can be
imported anywhere. The byte layout is defined once in FORMAT.md; the C encoder
(``nccl_shim/src/c4_proto.c``) and this module are both tested against the same example files
in ``nccl_shim/examples/`` (hex bytes beside their JSON rendering).

Worked example: job rank 3 of job ``gpt-22b-run7`` asks for the ports of its fourth
connection (index 3) to job rank 4, from 10.0.0.2 to 10.0.1.2, and the agent answers with two
flows carrying 75 % and 25 % of the bytes::

    >>> req = Lookup(req_id=7, pid=4242, comm_id=0x7F3A9C0100000001, local="10.0.0.2",
    ...              remote="10.0.1.2", remote_port=4792, conn_index=3, src_rank=3, dst_rank=4,
    ...              job="gpt-22b-run7")
    >>> data = encode(req)
    >>> (len(data), data[:4].hex())
    (144, '43340201')
    >>> decode(data) == req
    True
    >>> reply = Assign.answer(req, version=12, flows=(Flow(50021, 750_000), Flow(50022, 250_000)))
    >>> (reply.src_rank, reply.dst_rank, reply.status)
    (3, 4, 'ok')
    >>> decode(encode(reply)) == reply
    True

Malformed input (a wrong magic, a length that disagrees with the datagram, a count that does
not fit, a weight above 1) is an expected outcome on a socket anyone on the host can write
to, so ``decode`` returns a ``Malformed`` value naming the problem instead of raising.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

MAGIC = b"C4"
VERSION = 2
MAX_FLOWS = 16
MAX_PEERS = 8
PPM = 1_000_000
JOB_LEN = 64
MAX_DGRAM = 1024  # the largest single message (C4P_MAX_DGRAM)
MAX_BATCH = 8192  # the largest BATCH datagram (C4P_MAX_BATCH)
NO_RANK = -1  # a job or communicator rank the shim was not told

T_LOOKUP, T_ASSIGN, T_COLL, T_CONN, T_STATS, T_HANDOFF, T_BATCH = 1, 2, 3, 4, 5, 6, 7

_HEADER = struct.Struct("<2sBBHH")  # magic, version, type, total length, reserved
_LOOKUP = struct.Struct("<IIQ16s16sHHHHIiiI64s")
_ASSIGN = struct.Struct("<IIQ16s16sHBBii")
_FLOW = struct.Struct("<HHI16s16s")
_COLL = struct.Struct("<QQQQQiiIiBBBB")
_PEER = struct.Struct("<iiBBHIQQQQ")
_CONN = struct.Struct("<Q16s16sHHBBHiIIiiiQQQQQQ")
_SOCK = struct.Struct("<HHIQQQ")
_STATS = struct.Struct("<IiQQQQQQQQQQ64s")
_HELLO = struct.Struct("<IHHHHQQiiQI")
HELLO_MAGIC = 0x53483443  # "C4HS"
HELLO_LEN = _HELLO.size  # 48
VERDICT_OK, VERDICT_NO = b"C4OK", b"C4NO"

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
PEER_NET = 0x1
CONN_CLOSED, CONN_NET = 0x1, 0x2


def _code(table: dict[int, str], name: str) -> int:
    for code, n in table.items():
        if n == name:
            return code
    raise ValueError(f"unknown name {name!r}; expected one of {sorted(table.values())}")


# A host's shims name a handful of port addresses over and over: parsing one with `ipaddress`
# costs ~25 µs, four times per LOOKUP and its answer (most of a lookup's time), so both
# directions are cached (a bounded set in practice; the cache is bounded anyway).
@functools.lru_cache(maxsize=65536)
def _addr_to_bytes(addr: str) -> bytes:
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv4Address):
        return ipaddress.IPv6Address(f"::ffff:{ip}").packed
    return ip.packed


@functools.lru_cache(maxsize=65536)
def _addr_from_bytes(raw: bytes) -> str:
    ip = ipaddress.IPv6Address(raw)
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


_ZERO_ADDR = bytes(16)


def _addr_or_zero(addr: str) -> bytes:
    return _addr_to_bytes(addr) if addr else _ZERO_ADDR


def _addr_or_empty(raw: bytes) -> str:
    return "" if raw == _ZERO_ADDR else _addr_from_bytes(raw)


def _job_to_bytes(job: str) -> bytes:
    raw = job.encode()
    if len(raw) > JOB_LEN or b"\0" in raw:
        raise ValueError(f"job name {job!r} does not fit {JOB_LEN} NUL-free bytes")
    return raw.ljust(JOB_LEN, b"\0")


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
    version: int = 0  # the assignment version the connection runs on; 0 for a new one
    src_rank: int = NO_RANK  # job ranks of the two ends (FORMAT.md "Job identity")
    dst_rank: int = NO_RANK
    job: str = ""  # C4_JOB of the asking process


@dataclass(frozen=True)
class Flow:
    """One socket (or QP) of a connection: its source port, its share in parts per million,
    and the NIC port addresses the plan puts it on ("" = the connection's own; dual-port NICs
    spread one connection's flows over both ports)."""

    sport: int
    weight_ppm: int
    src: str = ""
    dst: str = ""

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
    src_rank: int = NO_RANK
    dst_rank: int = NO_RANK

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
            src_rank=req.src_rank,
            dst_rank=req.dst_rank,
        )

    @staticmethod
    def weights_to_ppm(weights: list[float]) -> list[int]:
        """API weights as ppm integers that sum to exactly 1,000,000, in proportion to the
        weights: a lookup answers one NCCL connection (a channel), whose flows carry only
        part of the API connection's weight when it has several channels (0.25 + 0.25 at two
        channels of two QPs is 500,000 + 500,000, not 750,000 + 250,000)."""
        total = sum(weights)
        ppm = [round(w / total * PPM) for w in weights] if total > 0 else [round(PPM / len(weights))] * len(weights)
        if ppm:
            ppm[ppm.index(max(ppm))] += PPM - sum(ppm)
        return ppm


@dataclass(frozen=True)
class Peer:
    """Progress of one (peer rank, direction) of a collective on this rank. `peer` is the
    communicator rank, `peer_job_rank` its job rank when the shim knows it (else -1)."""

    peer: int
    dir: Literal["send", "recv"]
    done: bool
    bytes: int
    t_first_us: int  # 0 = no byte moved yet
    t_last_us: int
    peer_job_rank: int = NO_RANK
    net_us: int | None = None  # time on the network; None when the shim cannot tell


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
    job_rank: int = NO_RANK  # the reporting process's job rank


@dataclass(frozen=True)
class SockStat:
    """One socket (flow) of a connection since it opened: its source port, current weight,
    bytes carried, last completion and time on the network."""

    sport: int
    weight_ppm: int
    bytes: int
    t_last_us: int = 0
    net_us: int | None = None


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
    peer_job_rank: int = NO_RANK  # from the handle (send side) or the hello (receive side)
    job_rank: int = NO_RANK
    peer_comm_rank: int = NO_RANK
    net_us: int | None = None


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
    handoffs: int = 0  # sockets the agent handed over from the host's fixed port
    route_fallbacks: int = 0  # connections that went to a listener's own port instead
    job_rank: int = NO_RANK
    job: str = ""


@dataclass(frozen=True)
class Handoff:
    """Agent -> shim, with one socket (SCM_RIGHTS): the hello the agent read from it."""

    sock_index: int
    nsocks: int
    conn_index: int
    uuid: int
    key: int  # names the receiving process: its agent socket is "\\0c4-shim-<key:016x>"
    job_rank: int
    comm_rank: int
    comm_id: int

    @property
    def socket_name(self) -> bytes:
        """The abstract Unix address of the process this socket is for."""
        return f"\0c4-shim-{self.key:016x}".encode()


@dataclass(frozen=True)
class Malformed:
    """A datagram that is not one whole, valid message; `reason` says what is wrong."""

    reason: str
    data: bytes = field(repr=False, default=b"")


Message = Lookup | Assign | Coll | Conn | Stats | Handoff


def _header(msg_type: int, body: bytes) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, msg_type, _HEADER.size + len(body), 0) + body


def encode(msg: Message) -> bytes:
    """The datagram for `msg`. Raises ValueError for values the format cannot carry."""
    if isinstance(msg, Lookup):
        body = _LOOKUP.pack(
            msg.req_id, msg.pid, msg.comm_id, _addr_to_bytes(msg.local),
            _addr_to_bytes(msg.remote), msg.remote_port, msg.conn_index, _code(KINDS, msg.kind),
            msg.max_flows, msg.version, msg.src_rank, msg.dst_rank, 0, _job_to_bytes(msg.job),
        )  # fmt: skip
        return _header(T_LOOKUP, body)
    if isinstance(msg, Assign):
        if len(msg.flows) > MAX_FLOWS:
            raise ValueError(f"{len(msg.flows)} flows; at most {MAX_FLOWS}")
        body = _ASSIGN.pack(
            msg.req_id, msg.version, msg.comm_id, _addr_to_bytes(msg.local),
            _addr_to_bytes(msg.remote), msg.conn_index, _code(STATUSES, msg.status),
            len(msg.flows), msg.src_rank, msg.dst_rank,
        ) + b"".join(
            _FLOW.pack(f.sport, 0, f.weight_ppm, _addr_or_zero(f.src), _addr_or_zero(f.dst))
            for f in msg.flows
        )  # fmt: skip
        return _header(T_ASSIGN, body)
    if isinstance(msg, Coll):
        if len(msg.peers) > MAX_PEERS:
            raise ValueError(f"{len(msg.peers)} peers; at most {MAX_PEERS}")
        flags = (COLL_INFLIGHT if msg.inflight else 0) | (COLL_TRUNCATED if msg.truncated else 0)
        body = _COLL.pack(
            msg.comm_hash, msg.seq, msg.bytes, msg.t_start_us, msg.t_end_us, msg.rank,
            msg.nranks, msg.pid, msg.job_rank, _code(OPS, msg.op), flags, len(msg.peers), 0,
        ) + b"".join(
            _PEER.pack(
                p.peer, p.peer_job_rank, _code(DIRS, p.dir), int(p.done),
                PEER_NET if p.net_us is not None else 0, 0, p.bytes, p.t_first_us, p.t_last_us,
                p.net_us or 0,
            )
            for p in msg.peers
        )  # fmt: skip
        return _header(T_COLL, body)
    if isinstance(msg, Conn):
        if len(msg.socks) > MAX_FLOWS:
            raise ValueError(f"{len(msg.socks)} sockets; at most {MAX_FLOWS}")
        flags = (CONN_CLOSED if msg.closed else 0) | (CONN_NET if msg.net_us is not None else 0)
        body = _CONN.pack(
            msg.comm_id, _addr_to_bytes(msg.local), _addr_to_bytes(msg.remote),
            msg.remote_port, msg.conn_index, _code(DIRS, msg.dir), len(msg.socks), 0,
            msg.peer_rank, msg.pid, flags, msg.peer_job_rank, msg.job_rank, msg.peer_comm_rank,
            msg.bytes, msg.msgs, msg.t_first_us, msg.t_last_us, msg.pending_since_us,
            msg.net_us or 0,
        ) + b"".join(
            _SOCK.pack(s.sport, 0, s.weight_ppm, s.bytes, s.t_last_us, s.net_us or 0)
            for s in msg.socks
        )  # fmt: skip
        return _header(T_CONN, body)
    if isinstance(msg, Stats):
        body = _STATS.pack(
            msg.pid, msg.job_rank, msg.ring_drops, msg.send_drops, msg.lookups,
            msg.lookup_timeouts, msg.lookup_failures, msg.bind_fallbacks, msg.records_sent,
            msg.handoffs, msg.route_fallbacks, 0, _job_to_bytes(msg.job),
        )  # fmt: skip
        return _header(T_STATS, body)
    if isinstance(msg, Handoff):
        return _header(T_HANDOFF, encode_hello(msg))
    raise TypeError(f"not a shim message: {type(msg).__name__}")


def encode_hello(h: Handoff) -> bytes:
    """The 48-byte shim-to-shim hello (FORMAT.md "Hello") for the same values."""
    return _HELLO.pack(
        HELLO_MAGIC, 2, h.sock_index, h.nsocks, h.conn_index, h.uuid, h.key, h.job_rank,
        h.comm_rank, h.comm_id, 0,
    )  # fmt: skip


def decode_hello(data: bytes) -> Handoff | Malformed:
    """The hello a sender writes first on each data socket (the agent reads it to route the
    socket), or Malformed."""
    if len(data) != HELLO_LEN:
        return Malformed(f"a hello is {HELLO_LEN} bytes, not {len(data)}", data)
    magic, ver, idx, n, conn, uuid, key, jr, cr, cid, _ = _HELLO.unpack(data)
    if magic != HELLO_MAGIC or ver != 2:
        return Malformed("not a version 2 hello", data)
    if not 1 <= n <= MAX_FLOWS or idx >= n:
        return Malformed(f"socket {idx} of {n}", data)
    return Handoff(idx, n, conn, uuid, key, jr, cr, cid)


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


def _job(raw: bytes) -> str:
    text, _, pad = raw.partition(b"\0")
    if pad.strip(b"\0"):
        raise _BadField("a job name with bytes after its end")
    try:
        return text.decode()
    except UnicodeDecodeError as e:
        raise _BadField("a job name that is not UTF-8") from e


def _decode_lookup(data: bytes) -> Lookup:
    if len(data) != _HEADER.size + _LOOKUP.size:
        raise _BadField("lookup has the wrong size")
    rid, pid, cid, la, ra, rport, idx, kind, maxf, ver, src, dst, _, job = _LOOKUP.unpack_from(
        data, _HEADER.size
    )
    return Lookup(
        rid, pid, cid, _addr_from_bytes(la), _addr_from_bytes(ra), rport, idx,
        _name(KINDS, kind, "kind"), maxf, ver, src, dst, _job(job),
    )  # fmt: skip


def _decode_assign(data: bytes) -> Assign:
    if len(data) < _HEADER.size + _ASSIGN.size:
        raise _BadField("assign is truncated")
    rid, ver, cid, la, ra, idx, status, n, src, dst = _ASSIGN.unpack_from(data, _HEADER.size)
    _counted(data, _ASSIGN.size, n, MAX_FLOWS, _FLOW, "flows")
    flows = tuple(
        Flow(sport, w, _addr_or_empty(sa), _addr_or_empty(da))
        for sport, _, w, sa, da in _items(data, _HEADER.size + _ASSIGN.size, n, _FLOW)
    )
    if any(f.weight_ppm > PPM for f in flows):
        raise _BadField("a weight above 1,000,000 ppm")
    return Assign(
        rid, ver, cid, _addr_from_bytes(la), _addr_from_bytes(ra), idx,
        _name(STATUSES, status, "status"), flows, src, dst,
    )  # fmt: skip


def _decode_coll(data: bytes) -> Coll:
    if len(data) < _HEADER.size + _COLL.size:
        raise _BadField("collective record is truncated")
    chash, seq, nbytes, t0, t1, rank, nranks, pid, jr, op, flags, n, _ = _COLL.unpack_from(
        data, _HEADER.size
    )
    _counted(data, _COLL.size, n, MAX_PEERS, _PEER, "peers")
    peers = []
    for peer, pjr, d, done, pf, _, b, tf, tl, net in _items(
        data, _HEADER.size + _COLL.size, n, _PEER
    ):
        if done > 1:
            raise _BadField(f"done is {done}")
        peers.append(
            Peer(peer, _name(DIRS, d, "dir"), bool(done), b, tf, tl, pjr,
                 net if pf & PEER_NET else None)
        )  # fmt: skip
    return Coll(
        chash, seq, nbytes, t0, t1, rank, nranks, pid, OPS.get(op, "Other"),
        bool(flags & COLL_INFLIGHT), bool(flags & COLL_TRUNCATED), tuple(peers), jr,
    )  # fmt: skip


def _decode_conn(data: bytes) -> Conn:
    if len(data) < _HEADER.size + _CONN.size:
        raise _BadField("connection record is truncated")
    (cid, la, ra, rport, idx, d, n, _, peer, pid, flags, pjr, jr, pcr,
     nbytes, msgs, tf, tl, pend, net) = _CONN.unpack_from(data, _HEADER.size)  # fmt: skip
    _counted(data, _CONN.size, n, MAX_FLOWS, _SOCK, "sockets")
    has_net = bool(flags & CONN_NET)
    socks = tuple(
        SockStat(sport, w, b, t, sn if has_net else None)
        for sport, _, w, b, t, sn in _items(data, _HEADER.size + _CONN.size, n, _SOCK)
    )
    return Conn(
        cid, _addr_from_bytes(la), _addr_from_bytes(ra), rport, idx, _name(DIRS, d, "dir"),
        peer, pid, bool(flags & CONN_CLOSED), nbytes, msgs, tf, tl, pend, socks, pjr, jr, pcr,
        net if has_net else None,
    )  # fmt: skip


def _decode_stats(data: bytes) -> Stats:
    if len(data) != _HEADER.size + _STATS.size:
        raise _BadField("stats record has the wrong size")
    pid, jr, drops, sdrops, lk, lkt, lkf, bf, sent, hand, route, _, job = _STATS.unpack_from(
        data, _HEADER.size
    )
    return Stats(pid, drops, sdrops, lk, lkt, lkf, bf, sent, hand, route, jr, _job(job))


def _decode_handoff(data: bytes) -> Handoff:
    if len(data) != _HEADER.size + HELLO_LEN:
        raise _BadField("hand-off has the wrong size")
    h = decode_hello(data[_HEADER.size :])
    if isinstance(h, Malformed):
        raise _BadField(h.reason)
    return h


_DECODERS: dict[int, Callable[[bytes], Message]] = {
    T_LOOKUP: _decode_lookup,
    T_ASSIGN: _decode_assign,
    T_COLL: _decode_coll,
    T_CONN: _decode_conn,
    T_STATS: _decode_stats,
    T_HANDOFF: _decode_handoff,
}


def encode_batch(messages: list[bytes]) -> bytes:
    """One BATCH datagram holding these encoded COLL/CONN messages (what a busy shim sends)."""
    body = b"".join(messages)
    if _HEADER.size + len(body) > MAX_BATCH:
        raise ValueError(f"a batch of {len(body)} bytes does not fit one datagram")
    return _header(T_BATCH, body)


def batch_parts(data: bytes) -> list[tuple[int, int, int]] | None:
    """Where the messages of a BATCH datagram are: (offset, length, type) each, COLL or CONN;
    None if it is not a well-formed batch (then none of it is taken). The one framing rule:
    the batch's header, then parts each valid by its own header (FORMAT.md §7)."""
    n = len(data)
    if (n < _HEADER.size or data[0:2] != MAGIC or data[2] != VERSION or data[3] != T_BATCH or
            data[4] | data[5] << 8 != n or data[6] or data[7]):
        return None
    parts, off = [], _HEADER.size
    while off < n:
        if n - off < _HEADER.size:
            return None
        size = data[off + 4] | data[off + 5] << 8
        kind = data[off + 3]
        if (size < _HEADER.size or size > n - off or kind not in (T_COLL, T_CONN) or
                data[off:off + 2] != MAGIC or data[off + 2] != VERSION or data[off + 6] or
                data[off + 7]):
            return None
        parts.append((off, size, kind))
        off += size
    return parts


def split_batch(data: bytes) -> list[bytes] | None:
    """The whole messages (COLL or CONN datagrams, each with its own header) inside one BATCH
    datagram, or None if it is not a well-formed batch (`batch_parts`). Each part still has
    to be decoded."""
    parts = batch_parts(data)
    return None if parts is None else [data[off:off + size] for off, size, _ in parts]


def decode(data: bytes) -> Message | Malformed:
    """The message in one datagram, or Malformed (never an exception) for anything invalid."""
    if len(data) < _HEADER.size:
        return Malformed("shorter than the 8-byte header", data)
    magic, version, msg_type, length, reserved = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return Malformed("bad magic", data)
    if version != VERSION:
        return Malformed(f"unsupported version {version}", data)
    if reserved:
        return Malformed("reserved header bytes are not zero", data)
    if length != len(data):
        return Malformed(f"header says {length} bytes, datagram has {len(data)}", data)
    decoder = _DECODERS.get(msg_type)
    if msg_type == T_BATCH:
        return Malformed("a BATCH holds several messages: split_batch it", data)
    if decoder is None:
        return Malformed(f"unknown message type {msg_type}", data)
    try:
        return decoder(data)
    except _BadField as e:
        return Malformed(str(e), data)


def to_json(msg: Message) -> dict[str, Any]:
    """The JSON rendering used by the example files: the dataclass fields plus ``type``."""
    names = {
        Lookup: "lookup",
        Assign: "assign",
        Coll: "coll",
        Conn: "conn",
        Stats: "stats",
        Handoff: "handoff",
    }

    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if hasattr(v, "__dataclass_fields__"):
            return {k: plain(getattr(v, k)) for k in v.__dataclass_fields__}
        return v

    return {"type": names[type(msg)], **plain(msg)}


def collective_record(coll: Coll, job: str, rank: int | None = None,
                      peer_ranks: dict[int, int] | None = None) -> dict[str, Any]:
    """API.md's ``POST /v1/telemetry/collectives`` record for `coll` (the agent knows the job).

    `rank` and `peer_ranks` (communicator rank -> job rank) default to the job ranks the shim
    put in the record; the agent passes its own mapping (node_agent.telemetry). In-flight
    values the shim sends as 0 become null, as the API asks; ``net_us`` is left out where the
    shim could not tell it.
    """
    ranks = peer_ranks or {}
    peers = []
    for p in coll.peers:
        entry: dict[str, Any] = {
            "peer": ranks.get(p.peer, p.peer_job_rank),
            "dir": p.dir,
            "bytes": p.bytes,
            "t_first_us": p.t_first_us or None,
            "t_last_us": p.t_last_us or None,
            "done": p.done,
        }
        if p.net_us is not None:
            entry["net_us"] = p.net_us
        peers.append(entry)
    return {
        "job": job,
        "comm": f"{coll.comm_hash:#x}",
        "rank": coll.job_rank if rank is None else rank,
        "nranks": coll.nranks,
        "op": coll.op,
        "seq": coll.seq,
        "bytes": coll.bytes,
        "t_start_us": coll.t_start_us,
        "t_end_us": coll.t_end_us or None,
        "peers": peers,
    }
