"""Telemetry values: what a node agent reports about each rank's collectives (API.md, Telemetry).

Frozen values whose field names are exactly the JSON's. They carry no validation beyond their
types (the API layer validates at the edge) and do no I/O. Times are microseconds on the
reporting host's own clock, which may be skewed against other hosts by tens of milliseconds:
compare times only within one record or one rank, never across hosts (durations such as
`net_us` compare anywhere). `rank` and `peer` are
the job's ranks (the numbering of the job's `ranks` and of its assignments' `src_rank` /
`dst_rank`), so that C4D can look up planned paths; `nranks` is the communicator's size.

One rank's record of an AllReduce, still in flight, reads::

    CollectiveRecord(job="gpt-22b-run7", comm="0x7f3a9c01", rank=3, nranks=16, op="AllReduce",
                     seq=1042, bytes=268435456, t_start_us=1764430000000000, t_end_us=None,
                     peers=(PeerProgress(peer=4, dir="send", bytes=33554432,
                                         t_first_us=1764430000001000,
                                         t_last_us=1764430000179000, done=False),),
                     host="host3")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PeerDir = Literal["send", "recv"]


@dataclass(frozen=True, slots=True)
class FlowProgress:
    """Progress of one flow (QP or TCP socket) of a connection, identified by its source port
    (the assignment's `udp_sport`): bytes sent (on the sender's entry) or received (on the
    receiver's) so far, and when it last moved (null while nothing has)."""

    sport: int
    bytes: int
    t_last_us: int | None = None
    net_us: int | None = None  # this flow's time on the network (API.md); None: not reported


@dataclass(frozen=True, slots=True)
class PeerProgress:
    """Progress of one connection of a rank in one collective, seen from that rank."""

    peer: int
    dir: PeerDir
    bytes: int
    t_first_us: int | None
    t_last_us: int | None
    done: bool
    flows: tuple[FlowProgress, ...] = ()  # optional per-flow progress; () when not reported
    # Microseconds during which at least one of this connection's chunks in this direction was
    # handed to the network and not yet completed (API.md); None when the transport cannot tell.
    net_us: int | None = None

    @property
    def net_rate_bytes_per_us(self) -> float | None:
        """Bytes over `net_us`: the rate while this connection's own chunks were on the network,
        which one slow element of a pipelined ring does not impose on its other connections."""
        if self.net_us is None or self.net_us <= 0 or self.bytes <= 0:
            return None
        return self.bytes / self.net_us

    @property
    def rate_bytes_per_us(self) -> float | None:
        """Bytes over `t_last_us - t_first_us`; None while the span is empty or unknown."""
        if self.t_first_us is None or self.t_last_us is None:
            return None
        span_us = self.t_last_us - self.t_first_us
        if span_us <= 0 or self.bytes <= 0:
            return None
        return self.bytes / span_us


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One rank's view of one collective; identified by `(job, comm, rank, seq)`."""

    job: str
    comm: str
    rank: int
    nranks: int
    op: str
    seq: int
    bytes: int
    t_start_us: int
    t_end_us: int | None
    peers: tuple[PeerProgress, ...]
    host: str

    @property
    def identity(self) -> tuple[str, str, int, int]:
        return (self.job, self.comm, self.rank, self.seq)

    @property
    def in_flight(self) -> bool:
        return self.t_end_us is None

    @property
    def duration_us(self) -> int | None:
        return None if self.t_end_us is None else self.t_end_us - self.t_start_us

    @property
    def last_activity_us(self) -> int:
        """The latest time this rank saw anything happen in the collective (own clock)."""
        latest_us = self.t_start_us
        for p in self.peers:
            if p.t_last_us is not None and p.t_last_us > latest_us:
                latest_us = p.t_last_us
        return latest_us if self.t_end_us is None else max(latest_us, self.t_end_us)

    @property
    def progress_key(self) -> tuple[int, int, int]:
        """Orders two reports of the same identity: finished beats in flight, then more bytes
        moved, then later activity. Replacing only by a key at least as large makes re-sends
        that arrive late or twice harmless."""
        moved = sum(p.bytes for p in self.peers)
        return (0 if self.t_end_us is None else 1, moved, self.last_activity_us)

    def peer(self, peer: int, dir: PeerDir) -> PeerProgress | None:
        for p in self.peers:
            if p.peer == peer and p.dir == dir:
                return p
        return None
