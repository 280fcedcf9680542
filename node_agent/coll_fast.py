"""The common case of a `COLL` datagram, from its bytes to its API record's JSON text at once.

The agent must carry tens of thousands of records a second on a fraction of a core, and in
Python the general path (a decoded dataclass, a dict per record and per peer, a JSON encoder)
costs about 30 µs a record. Most records are the easy case: a process whose job and rank the
agent knows, a well-formed record, and peers whose job ranks the shim (or the rank table)
gives. `coll_json` turns exactly those into JSON with struct and bytes formatting; for
anything else it returns None and the caller takes the general path
(`shim_protocol.decode` then `Mapper.on_coll`), which validates, holds, drops and counts. Both
must give the same record: tests/unit/node_agent/test_coll_fast.py checks it.

Reads the Mapper's state; changes only what the general path would (rank tables, counts).
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

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
_PEERS = [struct.Struct("<" + _PEER.format.lstrip("<") * k) for k in range(MAX_PEERS + 1)]
_HEAD = MAGIC + bytes((VERSION, T_COLL))
_DNAMES = ("send", "recv")
_PEER_MOVED = b'{"peer":%d,"dir":"%s","bytes":%d,"t_first_us":%d,"t_last_us":%d,"done":%s'
_PEER_STILL = b'{"peer":%d,"dir":"%s","bytes":%d,"t_first_us":null,"t_last_us":null,"done":%s'
_TAIL = b'%s","seq":%d,"bytes":%d,"t_start_us":%d,"t_end_us":%s,"peers":[%s]'
_OPS = {k: v.encode() for k, v in OPS.items()}
_DIRS = (b"send", b"recv")
_BOOL = (b"false", b"true")
_job_json: dict[str, bytes] = {}


def job_json(name: str) -> bytes:
    """A job name as a JSON string (escaped once per name)."""
    out = _job_json.get(name)
    if out is None:
        out = _job_json[name] = json.dumps(name).encode()
    return out


def coll_json(m: Mapper, data: bytes) -> bytes | None:
    """The API record for one COLL datagram, or None when it is not the easy case."""
    n = len(data)
    if (n < _FIXED or data[0:4] != _HEAD or data[6] or data[7] or data[4] | data[5] << 8 != n):
        return None
    (comm, seq, nbytes, t0, t1, crank, nranks, pid, jr, op, flags, npeers,
     _) = _COLL.unpack_from(data, _HEADER.size)  # fmt: skip
    if npeers > MAX_PEERS or n != _FIXED + npeers * _PEER_SIZE or t0 <= 0:
        return None
    ident = m.identity.get(pid)
    if ident is None or not ident.job:
        return None
    rank = jr if jr >= 0 else ident.job_rank
    job = m.job_for(ident.job, rank)
    if job is None or rank < 0:
        return None
    ranks = job.ranks
    if rank not in ranks:
        return None
    # what is the same in every record of this process in this communicator, rendered once
    key = (pid, comm, crank, rank, nranks)
    ctx = m.fast_ctx.get(key)
    if ctx is None or ctx[0] is not job:
        head = b'{"job":%s,"comm":"%s","rank":%d,"nranks":%d,"op":"' % (
            job_json(job.name), hex(comm).encode(), rank, max(nranks, 1))
        ctx = m.fast_ctx[key] = (job, m.comm_ranks[(job.name, comm)], head)
    table = ctx[1]
    if table.get(crank) != rank:
        m._learn(job.name, comm, crank, rank)
    net_ok = m.caps.net_us
    flows_cache = m._flows_json
    peers = []
    v = _PEERS[npeers].unpack_from(data, _FIXED)
    for i in range(0, 10 * npeers, 10):
        peer, pjr, d, done, pflags, _, pb, tf, tl, net = v[i:i + 10]
        if d > 1 or done > 1:
            return None
        if pjr >= 0:
            if table.get(peer) != pjr:
                m._learn(job.name, comm, peer, pjr)
        else:
            pjr = table.get(peer, -1)
        if pjr < 0 or pjr == rank or pjr not in ranks:
            return None  # the general path waits for it, or leaves it out and counts it
        if pb > 0 and tf > 0 and tl >= tf:
            text = _PEER_MOVED % (pjr, _DIRS[d], pb, tf, tl, _BOOL[done])
        else:
            text = _PEER_STILL % (pjr, _DIRS[d], pb, _BOOL[done])
        if pflags & PEER_NET and net_ok:
            text += b',"net_us":%d' % net
        dname = _DNAMES[d]
        flows = flows_cache.get((pid, comm, peer, dname))
        if flows is None:
            flows = m.flows_json(pid, comm, peer, dname)
        if flows:
            text += b',"flows":' + flows
        peers.append(text + b"}")
    m.counts.records_in += 1
    m.counts.records_out += 1
    rec = ctx[2] + _TAIL % (_OPS.get(op, b"Other"), seq, nbytes, t0,
                            b"%d" % t1 if t1 and t1 >= t0 else b"null", b",".join(peers))
    if flags & COLL_TRUNCATED and m.caps.truncated:
        rec += b',"truncated":true'
    return rec + b"}"
