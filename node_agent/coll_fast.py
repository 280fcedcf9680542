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
    if n < _FIXED or data[0:2] != MAGIC or data[2] != VERSION or data[3] != T_COLL:
        return None
    (comm, seq, nbytes, t0, t1, crank, nranks, pid, jr, op, flags, npeers,
     _) = _COLL.unpack_from(data, _HEADER.size)  # fmt: skip
    if (npeers > MAX_PEERS or n != _FIXED + npeers * _PEER.size or
            data[4] | data[5] << 8 != n or data[6] or data[7] or t0 <= 0):
        return None
    ident = m.identity.get(pid)
    if ident is None or not ident.job:
        return None
    rank = jr if jr >= 0 else ident.job_rank
    job = m.job_for(ident.job, rank)
    if job is None or rank < 0 or rank not in job.ranks:
        return None
    table = m.comm_ranks[(job.name, comm)]
    if table.get(crank) != rank:
        m._learn(job.name, comm, crank, rank)
    caps = m.caps
    peers = []
    off = _FIXED
    for _ in range(npeers):
        peer, pjr, d, done, pflags, _, pb, tf, tl, net = _PEER.unpack_from(data, off)
        off += _PEER.size
        if d > 1 or done > 1:
            return None
        if pjr >= 0:
            if table.get(peer) != pjr:
                m._learn(job.name, comm, peer, pjr)
        else:
            pjr = table.get(peer, -1)
        if pjr < 0 or pjr == rank or pjr not in job.ranks:
            return None  # the general path waits for it, or leaves it out and counts it
        moved = pb > 0 and tf > 0 and tl >= tf
        text = b'{"peer":%d,"dir":"%s","bytes":%d,"t_first_us":%s,"t_last_us":%s,"done":%s' % (
            pjr, _DIRS[d], pb, b"%d" % tf if moved else b"null", b"%d" % tl if moved else b"null",
            _BOOL[done])
        if pflags & PEER_NET and caps.net_us:
            text += b',"net_us":%d' % net
        flows = m.flows_json(pid, comm, peer, "send" if d == 0 else "recv")
        if flows:
            text += b',"flows":' + flows
        peers.append(text + b"}")
    m.counts.records_in += 1
    m.counts.records_out += 1
    rec = (b'{"job":%s,"comm":"%s","rank":%d,"nranks":%d,"op":"%s","seq":%d,"bytes":%d,'
           b'"t_start_us":%d,"t_end_us":%s,"peers":[%s]' % (
               job_json(job.name), hex(comm).encode(), rank, max(nranks, 1),
               _OPS.get(op, b"Other"), seq, nbytes, t0,
               b"%d" % t1 if t1 and t1 >= t0 else b"null", b",".join(peers)))
    if flags & COLL_TRUNCATED and caps.truncated:
        rec += b',"truncated":true'
    return rec + b"}"
