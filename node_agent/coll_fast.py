"""The common case of a `COLL` datagram, from its bytes to its API record's JSON text at once.

The agent must carry tens of thousands of records a second on a fraction of a core, and in
Python the general path (a decoded dataclass, a dict per record and per peer, a JSON encoder)
costs about 30 µs a record. Most records are the easy case: a process whose job and rank the
agent knows, a well-formed record, and peers whose job ranks the shim (or the rank table)
gives. `coll_json` turns exactly those into JSON with one struct unpack and bytes formatting;
for anything else it returns None and the caller takes the general path
(`shim_protocol.decode` then `Mapper.on_coll`), which validates, holds, drops and counts. Both
must give the same record: tests/unit/node_agent/test_coll_fast.py checks it.

What is the same in every record of one process in one communicator (the job, its rank table,
the record's head, and per peer the entry's head and where its flows are) is rendered once and
kept in `Mapper.fast_ctx` (cleared when the controller's capabilities change and on every
expiry pass). In a BATCH (`batch`), records are read in place, without copying each out, and a
process's identity is looked up once per batch: nothing on this path changes it.

Reads the Mapper's state; changes only what the general path would (rank tables, counts).
"""

from __future__ import annotations

import json
import operator
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from node_agent.shim_protocol import (
    _COLL,
    _HEADER,
    _PEER,
    COLL_TRUNCATED,
    MAGIC,
    MAX_PEERS,
    OPS,
    PEER_NET,
    T_COLL,
    VERSION,
)

if TYPE_CHECKING:
    from node_agent.telemetry import Mapper

_FIXED = _HEADER.size + _COLL.size
_PEER_SIZE = _PEER.size
_NPEERS_AT = _HEADER.size + struct.calcsize("<QQQQQiiIiBB")  # the COLL's peer count
# header, COLL and k peers in one unpack; the peers' fields start at index _P0
_WHOLE = [struct.Struct(_HEADER.format + _COLL.format.lstrip("<") + _PEER.format.lstrip("<") * k)
          for k in range(MAX_PEERS + 1)]
_P0 = len(_HEADER.unpack(bytes(_HEADER.size))) + len(_COLL.unpack(bytes(_COLL.size)))
_DNAMES = ("send", "recv")
MAX_SHAPES = 64  # formats kept per process and communicator (then started again)
_MOVED = b'%d,"t_first_us":%d,"t_last_us":%d,"done":%s'
_STILL = b'%d,"t_first_us":null,"t_last_us":null,"done":%s'
_TAIL = b'%s","seq":%d,"bytes":%d,"t_start_us":%d,"t_end_us":%s,"peers":[%s]'
_OPS = {k: v.encode() for k, v in OPS.items()}
_BOOL = (b"false", b"true")
_job_json: dict[str, bytes] = {}

# (job, its ranks, rank table, record head, net_us ok, truncated ok, rank, job name,
# templates by record shape, packed shapes by record shape)
Ctx = tuple[Any, Any, dict[int, int], bytes, bool, bool, int, str, dict[Any, "_Template"],
            dict[Any, "_Shape"]]


def job_json(name: str) -> bytes:
    """A job name as a JSON string (escaped once per name)."""
    out = _job_json.get(name)
    if out is None:
        out = _job_json[name] = json.dumps(name).encode()
    return out


def coll_json(m: Mapper, data: bytes) -> bytes | None:
    """The API record for one COLL datagram, or None when it is not the easy case."""
    return coll_at(m, data, 0, len(data), None)


def coll_entry(m: Mapper, data: bytes) -> tuple[bytes, bytes] | None:
    """The packed entry for one COLL datagram, or None when it is not the easy case."""
    return coll_packed_at(m, data, 0, len(data), None)


def _context(m: Mapper, pid: int, comm: int, crank: int, jr: int, nranks: int) -> Ctx | None:
    ident = m.identity.get(pid)
    if ident is None or not ident.job:
        return None
    rank = jr if jr >= 0 else ident.job_rank
    job = m.job_for(ident.job, rank)
    if job is None or rank < 0 or rank not in job.ranks:
        return None
    key = (pid, comm, crank, rank, nranks)
    ctx = m.fast_ctx.get(key)
    if ctx is None or ctx[0] is not job:
        head = b'{"job":%s,"comm":"%s","rank":%d,"nranks":%d,"op":"' % (
            job_json(job.name), hex(comm).encode(), rank, max(nranks, 1))
        caps = m.caps
        ctx = m.fast_ctx[key] = (job, job.ranks, m.comm_ranks[(job.name, comm)], head,
                                 caps.net_us, caps.truncated, rank, job.name, {}, {})
    return ctx


def _checked(m: Mapper, data: bytes, off: int, n: int,
             memo: dict[tuple[int, int, int, int, int], Ctx | None] | None) -> tuple[Any, int, Ctx] | None:
    """The n-byte COLL message at `off` unpacked, its peer count and its context (the rank
    table learnt from it), or None when it is not a whole COLL message of a known process."""
    if n < _FIXED:
        return None
    npeers = data[off + _NPEERS_AT]
    if npeers > MAX_PEERS or n != _FIXED + npeers * _PEER_SIZE:
        return None
    v = _WHOLE[npeers].unpack_from(data, off)
    (magic, version, kind, length, reserved, comm, _, _, t0, _, crank, nranks, pid, jr) = v[:14]
    if (kind != T_COLL or magic != MAGIC or version != VERSION or length != n or reserved or
            t0 <= 0):
        return None
    if memo is None:
        ctx = _context(m, pid, comm, crank, jr, nranks)
    else:
        mkey = (pid, comm, crank, jr, nranks)
        if mkey in memo:
            ctx = memo[mkey]
        else:
            ctx = memo[mkey] = _context(m, pid, comm, crank, jr, nranks)
    if ctx is None:
        return None
    if ctx[2].get(crank) != ctx[6]:
        m._learn(ctx[7], comm, crank, ctx[6])
    return v, npeers, ctx


def coll_at(m: Mapper, data: bytes, off: int, n: int,
            memo: dict[tuple[int, int, int, int, int], Ctx | None] | None) -> bytes | None:
    """The record of the n-byte COLL message at `off` in `data`, or None (see the module).
    `memo`: contexts already looked up in this batch (identities cannot change inside one)."""
    got = _checked(m, data, off, n, memo)
    if got is None:
        return None
    v, npeers, ctx = got
    t0, t1 = v[8], v[9]
    # The record's shape: what its text is made of besides the counters. Records of one shape
    # share one format and the indices of the counters it takes (a `_Template`).
    pick = _PICK[npeers]
    moved: bool | tuple[bool, ...] = 0 not in pick.pbs_tfs(v) and all(
        map(operator.ge, pick.tls(v), pick.tfs(v)))  # counters are unsigned: 0 is "not > 0"
    if not moved:  # some peer without bytes or times: which ones is part of the shape
        moved = tuple(map(_moved, pick.pbs(v), pick.tfs(v), pick.tls(v)))
    key = (pick.sig(v), t1 >= t0 and t1 > 0, moved)
    tpl = ctx[8].get(key)
    if tpl is None or tpl.learned != m.learned or (
            tpl.flows_gen != m.flows_gen and not _flows_same(m, tpl)):
        tpl = _template(m, ctx, v, npeers, v[5], v[12])
        if tpl is None:
            return None
        if len(ctx[8]) >= MAX_SHAPES:  # e.g. an alltoall's peers in a new order each time
            ctx[8].clear()
        ctx[8][key] = tpl
    counts = m.counts
    counts.records_in += 1
    counts.records_out += 1
    return tpl.text % tpl.args(v)


def _flows_same(m: Mapper, tpl: _Template | _Shape) -> bool:
    """Whether the flows texts a template was made from are still the Mapper's (some entry
    was dropped since: a CONN, an expiry); if so the template is current again."""
    if tpl.flow_keys and list(map(m._flows_json.get, tpl.flow_keys)) != tpl.flows:
        return False
    tpl.flows_gen = m.flows_gen
    return True


class _Picks:
    """Per peer count: getters of a COLL's fields from its `_WHOLE` unpack."""

    def __init__(self, npeers: int) -> None:
        peers = [_P0 + 10 * k for k in range(npeers)]
        # op, flags, and per peer: comm rank, job rank, direction, done, flags
        self.sig = operator.itemgetter(14, 15, *(b + i for b in peers for i in range(5)))
        self.pbs = _getter([b + 6 for b in peers])
        self.pbs_tfs = _getter([b + i for b in peers for i in (6, 7)])
        self.tfs = _getter([b + 7 for b in peers])
        self.tls = _getter([b + 8 for b in peers])


def _getter(indices: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    if len(indices) == 1:
        one = indices[0]
        return lambda v: (v[one],)
    return operator.itemgetter(*indices) if indices else (lambda v: ())


_PICK = [_Picks(k) for k in range(MAX_PEERS + 1)]


def _moved(pb: int, tf: int, tl: int) -> bool:
    return pb > 0 and tf > 0 and tl >= tf


class _Template:
    """A record shape's format, the unpack indices of the counters it takes, and what it was
    made from: the rank tables' state (`Mapper.learned`) and each peer's flows text (checked
    again only when the Mapper dropped a flows text since, `Mapper.flows_gen`)."""

    __slots__ = ("args", "flow_keys", "flows", "flows_gen", "learned", "text")

    def __init__(self, text: bytes, args: Callable[[tuple[Any, ...]], tuple[Any, ...]],
                 learned: int, flow_keys: list[tuple[int, int, int, str]],
                 flows: list[bytes], flows_gen: int) -> None:
        self.text, self.args, self.learned = text, args, learned
        self.flow_keys, self.flows, self.flows_gen = flow_keys, flows, flows_gen


def _template(m: Mapper, ctx: Ctx, v: tuple[Any, ...], npeers: int, comm: int,
              pid: int) -> _Template | None:
    """The format of records shaped like `v` (learning the ranks its peers name, as the
    general path would), or None when it is not the easy case."""
    _, ranks, table, head, net_ok, trunc_ok, rank, name, _, _ = ctx
    op, flags, t0, t1 = v[14], v[15], v[8], v[9]
    text = [head.replace(b"%", b"%%"), _OPS.get(op, b"Other"),
            b'","seq":%d,"bytes":%d,"t_start_us":%d,"t_end_us":']
    args = [6, 7, 8]
    if t1 and t1 >= t0:
        text.append(b"%d")
        args.append(9)
    else:
        text.append(b"null")
    text.append(b',"peers":[')
    flow_keys: list[tuple[int, int, int, str]] = []
    flows_used: list[bytes] = []
    bases = range(_P0, _P0 + 10 * npeers, 10)
    # As the general path: every rank the record names is learned first, then peers resolved.
    # A record that contradicts itself (one communicator rank, two job ranks) goes there too:
    # it counts each such conflict, every time, where a kept format would learn nothing.
    if not _learn_peers(m, v, bases, rank, table, name, comm):
        return None
    for k, i in enumerate(bases):
        peer, pjr, d, done, pflags, _, pb, tf, tl, _ = v[i:i + 10]
        if pjr < 0:
            pjr = table.get(peer, -1)
        if pjr < 0 or pjr == rank or pjr not in ranks:
            return None  # the general path waits for it, or leaves it out and counts it
        dname = _DNAMES[d]
        text.append((b",{" if k else b"{") + b'"peer":%d,"dir":"%s","bytes":%%d' % (
            pjr, dname.encode()))
        args.append(i + 6)
        if pb > 0 and tf > 0 and tl >= tf:
            text.append(b',"t_first_us":%d,"t_last_us":%d')
            args += [i + 7, i + 8]
        else:
            text.append(b',"t_first_us":null,"t_last_us":null')
        text.append(b',"done":' + _BOOL[done])
        if pflags & PEER_NET and net_ok:
            text.append(b',"net_us":%d')
            args.append(i + 9)
        fkey = (pid, comm, peer, dname)
        flows = m.flows_json(*fkey)
        flow_keys.append(fkey)
        flows_used.append(flows)
        if flows:
            text.append(b',"flows":' + flows.replace(b"%", b"%%"))
        text.append(b"}")
    text.append(b"]")
    if flags & COLL_TRUNCATED and trunc_ok:
        text.append(b',"truncated":true')
    text.append(b"}")
    return _Template(b"".join(text), operator.itemgetter(*args), m.learned, flow_keys,
                     flows_used, m.flows_gen)


def coll_packed_at(m: Mapper, data: bytes, off: int, n: int,
                   memo: dict[tuple[int, int, int, int, int], Ctx | None] | None
                   ) -> tuple[bytes, bytes] | None:
    """The packed entry (shape text, the message itself) of the n-byte COLL message at `off`,
    or None (as `coll_at`). The counters stay in the message: the controller applies the
    JSON form's rules to them (controller.domain.coll_packed), so a shape is what a record's
    text holds besides its counters, and records differ in shape far less often."""
    got = _checked(m, data, off, n, memo)
    if got is None:
        return None
    v, npeers, ctx = got
    key = _PICK[npeers].sig(v)
    shape = ctx[9].get(key)
    if shape is None or shape.learned != m.learned or (
            shape.flows_gen != m.flows_gen and not _flows_same(m, shape)):
        shape = _shape(m, ctx, v, npeers, v[5], v[12])
        if shape is None:
            return None
        if len(ctx[9]) >= MAX_SHAPES:
            ctx[9].clear()
        ctx[9][key] = shape
    counts = m.counts
    counts.records_in += 1
    counts.records_out += 1
    return shape.text, data[off:off + n] if n != len(data) else data


class _Shape:
    """A packed record shape's JSON text and what it was made from (as `_Template`)."""

    __slots__ = ("flow_keys", "flows", "flows_gen", "learned", "text")

    def __init__(self, text: bytes, learned: int, flow_keys: list[tuple[int, int, int, str]],
                 flows: list[bytes], flows_gen: int) -> None:
        self.text, self.learned = text, learned
        self.flow_keys, self.flows, self.flows_gen = flow_keys, flows, flows_gen


def _learn_peers(m: Mapper, v: tuple[Any, ...], bases: range, rank: int, table: dict[int, int],
                 name: str, comm: int) -> bool:
    """Learn every job rank a record names for its peers (the fast paths' part of what the
    general path does); False when the record is not the easy case (a direction or done flag
    out of range, or one communicator rank named with two job ranks)."""
    said = {v[10]: rank}
    for i in bases:
        peer, pjr, d, done = v[i:i + 4]
        if d > 1 or done > 1:
            return False
        if pjr >= 0:
            if said.setdefault(peer, pjr) != pjr:
                return False
            if table.get(peer) != pjr:
                m._learn(name, comm, peer, pjr)
    return True


def _shape(m: Mapper, ctx: Ctx, v: tuple[Any, ...], npeers: int, comm: int,
           pid: int) -> _Shape | None:
    """The packed shape of records like `v`, or None when it is not the easy case; the same
    decisions and learning as `_template`."""
    _, ranks, table, head, net_ok, _, rank, name, _, _ = ctx
    op, flags = v[14], v[15]
    bases = range(_P0, _P0 + 10 * npeers, 10)
    if not _learn_peers(m, v, bases, rank, table, name, comm):
        return None
    text = [head, _OPS.get(op, b"Other"), b'","peers":[']
    flow_keys: list[tuple[int, int, int, str]] = []
    flows_used: list[bytes] = []
    for k, i in enumerate(bases):
        peer, pjr, d, done, pflags = v[i:i + 5]
        if pjr < 0:
            pjr = table.get(peer, -1)
        if pjr < 0 or pjr == rank or pjr not in ranks:
            return None
        dname = _DNAMES[d]
        text.append((b",{" if k else b"{") + b'"peer":%d,"dir":"%s","done":%s' % (
            pjr, dname.encode(), _BOOL[done]))
        if pflags & PEER_NET and net_ok:
            text.append(b',"net":true')
        fkey = (pid, comm, peer, dname)
        flows = m.flows_json(*fkey)
        flow_keys.append(fkey)
        flows_used.append(flows)
        if flows:
            text.append(b',"flows":' + flows)
        text.append(b"}")
    text.append(b"]")
    if flags & COLL_TRUNCATED:
        text.append(b',"truncated":true')
    text.append(b"}")
    return _Shape(b"".join(text), m.learned, flow_keys, flows_used, m.flows_gen)


def batch(m: Mapper, data: bytes, parts: list[tuple[int, int, int]],
          general: Callable[[bytes], None], packed: bool = False) -> list[Any]:
    """The records of a BATCH's easy COLL messages as JSON text (`packed`: as packed entries),
    in order; every other message goes to `general` (its own bytes) at its place in the
    order."""
    if packed:
        return _batch_packed(m, data, parts, general)
    out: list[Any] = []
    memo: dict[tuple[int, int, int, int, int], Ctx | None] = {}
    for off, size, kind in parts:
        rec = coll_at(m, data, off, size, memo) if kind == T_COLL else None
        if rec is not None:
            out.append(rec)
        else:  # at its place: a CONN changes the flows of the records after it
            general(data[off:off + size])
    return out


# A COLL message's bytes other than its counters (seq, bytes, times; per peer bytes, times,
# net_us): the header, the communicator, then from the communicator rank to the peer count,
# and per peer its ranks, direction, done and flags. What `coll_packed_at` makes of a message
# (its shape's text, or None) depends on these bytes, on the start time being set, and on the
# Mapper's state; so within one BATCH, while that state is unchanged, a message whose key was
# seen already gives that message's shape at once.
_AT_T0 = _HEADER.size + 24  # the COLL's t_start_us
_ZERO8 = bytes(8)
_KEY = [struct.Struct("<16s32x20s" + "12s36x" * k) for k in range(MAX_PEERS + 1)]
assert _KEY[0].size == _FIXED and _KEY[1].size == _FIXED + _PEER_SIZE


def _batch_packed(m: Mapper, data: bytes, parts: list[tuple[int, int, int]],
                  general: Callable[[bytes], None]) -> list[Any]:
    """`batch` in the packed form. The first message of each key in the batch takes
    `coll_packed_at`; the rest of that key reuse its shape (`_KEY`), checking only the start
    time, while the Mapper's rank tables and flows are as they were (any message that takes
    the general path, or learns a rank, starts the reuse again): the same entries as
    `coll_packed_at` gives for each (tests/unit/node_agent/test_coll_fast.py)."""
    out: list[Any] = []
    add = out.append
    memo: dict[tuple[int, int, int, int, int], Ctx | None] = {}
    seen: dict[tuple[bytes, ...], bytes] = {}
    state = (m.learned, m.flows_gen)
    reused = 0
    for off, size, kind in parts:
        key = None
        if kind == T_COLL and size >= _FIXED:
            k = data[off + _NPEERS_AT]
            if k <= MAX_PEERS and size == _FIXED + k * _PEER_SIZE:
                key = _KEY[k].unpack_from(data, off)
                text = seen.get(key)
                if text is not None and data[off + _AT_T0:off + _AT_T0 + 8] != _ZERO8:
                    add((text, data[off:off + size]))
                    reused += 1
                    continue
        rec = coll_packed_at(m, data, off, size, memo) if kind == T_COLL else None
        if rec is not None:
            add(rec)
            now = (m.learned, m.flows_gen)
            if now != state:  # it learned a rank: what was seen may render differently now
                seen.clear()
                state = now
            if key is not None:
                seen[key] = rec[0]
        else:  # at its place: a CONN changes the flows of the records after it
            general(data[off:off + size])
            seen.clear()
            state = (m.learned, m.flows_gen)
    if reused:
        counts = m.counts
        counts.records_in += reused
        counts.records_out += reused
    return out
