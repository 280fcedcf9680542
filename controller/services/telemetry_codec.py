"""Collective records as compact JSON for the telemetry inbox (PostgreSQL sharding): nested
arrays in the fields' order, so a replica that did not receive a batch rebuilds the very
values the receiving replica validated."""

from __future__ import annotations

import json
from collections.abc import Sequence

from controller.domain.telemetry import CollectiveRecord, FlowProgress, PeerProgress


def encode(records: Sequence[CollectiveRecord]) -> str:
    return json.dumps([
        [r.job, r.comm, r.rank, r.nranks, r.op, r.seq, r.bytes, r.t_start_us, r.t_end_us, r.host,
         [[p.peer, p.dir, p.bytes, p.t_first_us, p.t_last_us, p.done, p.net_us,
           [[f.sport, f.bytes, f.t_last_us, f.net_us] for f in p.flows]] for p in r.peers]]
        for r in records], separators=(",", ":"))


def decode(body: str) -> list[CollectiveRecord]:
    return [CollectiveRecord(job=job, comm=comm, rank=rank, nranks=nranks, op=op, seq=seq, bytes=size,
                             t_start_us=t_start, t_end_us=t_end, host=host,
                             peers=tuple(PeerProgress(peer, direction, pbytes, t_first, t_last, done,
                                                      tuple(FlowProgress(*f) for f in flows), net_us)
                                         for peer, direction, pbytes, t_first, t_last, done, net_us, flows in peers))
            for job, comm, rank, nranks, op, seq, size, t_start, t_end, host, peers in json.loads(body)]
