"""Collective records as compact JSON for the telemetry inbox (PostgreSQL sharding): nested
arrays in the fields' order, so a replica that did not receive a batch rebuilds the very
values the receiving replica validated.

`encode` and `records` take any record-shaped values (`RecordIn`: the API's validated
request models as well as domain `CollectiveRecord`s), so a replica that only appends a batch
to the inbox never builds domain objects for it: the shard's owner does, once, when it
decodes the row for its detectors (a frozen dataclass per record, peer and flow is a large
part of a record's cost in Python)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from controller.domain.telemetry import CollectiveRecord, FlowProgress, PeerProgress


class FlowIn(Protocol):
    @property
    def sport(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def t_last_us(self) -> int | None: ...
    @property
    def net_us(self) -> int | None: ...


class PeerIn(Protocol):
    @property
    def peer(self) -> int: ...
    @property
    def dir(self) -> str: ...
    @property
    def bytes(self) -> int: ...
    @property
    def t_first_us(self) -> int | None: ...
    @property
    def t_last_us(self) -> int | None: ...
    @property
    def done(self) -> bool: ...
    @property
    def net_us(self) -> int | None: ...
    @property
    def flows(self) -> Sequence[FlowIn]: ...


class RecordIn(Protocol):
    """A collective record as validated at the edge (API.md's fields; the host is the batch's)."""

    @property
    def job(self) -> str: ...
    @property
    def comm(self) -> str: ...
    @property
    def rank(self) -> int: ...
    @property
    def nranks(self) -> int: ...
    @property
    def op(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def t_start_us(self) -> int: ...
    @property
    def t_end_us(self) -> int | None: ...
    @property
    def peers(self) -> Sequence[PeerIn]: ...


def _host(r: RecordIn, host: str) -> str:
    """A domain record keeps its own host; an edge record has the batch's."""
    return r.host if isinstance(r, CollectiveRecord) else host


def encode(records: Sequence[RecordIn], host: str) -> str:
    return json.dumps([
        [r.job, r.comm, r.rank, r.nranks, r.op, r.seq, r.bytes, r.t_start_us, r.t_end_us, _host(r, host),
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


def records(items: Sequence[RecordIn], host: str) -> list[CollectiveRecord]:
    """Domain records of record-shaped values (domain records are kept as they are)."""
    return [r if isinstance(r, CollectiveRecord) else CollectiveRecord(
        job=r.job, comm=r.comm, rank=r.rank, nranks=r.nranks, op=r.op, seq=r.seq, bytes=r.bytes,
        t_start_us=r.t_start_us, t_end_us=r.t_end_us, host=host,
        peers=tuple(PeerProgress(p.peer, p.dir, p.bytes, p.t_first_us, p.t_last_us, p.done,  # type: ignore[arg-type]
                                 tuple(FlowProgress(f.sport, f.bytes, f.t_last_us, f.net_us) for f in p.flows),
                                 p.net_us)
                    for p in r.peers))
        for r in items]
