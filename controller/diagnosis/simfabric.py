"""The simulator's fabric, communicators and faults (used by tests, bench and `c4 demo`).

Self-contained on purpose (it does not need the topology package): a 2-tier leaf-spine fabric
with one single-port NIC per host and one rank per host, host `host{r}` on leaf
`leaf{r // hosts_per_leaf}`, and hand-built routes in API.md's canonical link names. Each
connection has `channels` flows over distinct spines; channel c's flow has source port
`SPORT_BASE + c` (as an assignment's `udp_sport`). Pure and deterministic; no I/O.

With 16 ranks, 8 hosts per leaf and 2 spines, rank 3 -> rank 12 on channel 0 crosses::

    host3:mlx5_0:p0--leaf0:Ethernet35, leaf0:Ethernet1--spine1:Ethernet0 (ab),
    leaf1:Ethernet1--spine1:Ethernet1 (ba), host12:mlx5_0:p0--leaf1:Ethernet36 (ba)
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Literal

from controller.diagnosis.routes import Connection, JobRoutes, PlannedFlow
from controller.domain.alarms import AlarmKind, Suspect, SuspectKind

FaultKind = Literal[
    "comm_hang", "noncomm_hang", "slow_nic_port", "slow_link", "noncomm_slow", "straggler"
]


@dataclass(frozen=True, slots=True)
class Fault:
    """`target`: a rank number (noncomm_hang, noncomm_slow, straggler), a port name
    (slow_nic_port, or comm_hang on a port) or a link name (slow_link, comm_hang).
    `direction` ("ab", "ba", "" for both) limits a link fault to one direction. `factor`
    multiplies rates (slow_*: 0.2; comm_hang: 0) or compute time (noncomm_slow: 4)."""

    kind: FaultKind
    onset_s: float
    target: str
    direction: str = ""
    factor: float = 0.2
    end_s: float | None = None  # repaired then (rate faults only); None: never

    def active(self, at_us: int, start_us: int) -> bool:
        if at_us < start_us + int(self.onset_s * 1_000_000):
            return False
        return self.end_s is None or at_us < start_us + int(self.end_s * 1_000_000)

    def expected(self) -> tuple[AlarmKind, Suspect] | None:
        """The alarm kind and first suspect a correct diagnosis names; None for no alarm."""
        if self.kind == "straggler":
            return None
        if self.kind in ("noncomm_hang", "noncomm_slow"):
            kind = AlarmKind(self.kind)
            return (kind, Suspect(SuspectKind.HOST, host_name(int(self.target))))
        is_link = "--" in self.target
        suspect = Suspect(SuspectKind.LINK if is_link else SuspectKind.NIC_PORT, self.target)
        kind = AlarmKind.COMM_HANG if self.kind == "comm_hang" else AlarmKind.COMM_SLOW
        return (kind, suspect)


SPORT_BASE = 49152


def host_name(rank: int) -> str:
    return f"host{rank}"


def port_name(rank: int) -> str:
    return f"host{rank}:mlx5_0:p0"


def host_link(rank: int, hosts_per_leaf: int) -> str:
    leaf = rank // hosts_per_leaf
    return f"{port_name(rank)}--leaf{leaf}:Ethernet{32 + rank % hosts_per_leaf}"


def fabric_link(leaf: int, spine: int) -> str:
    return f"leaf{leaf}:Ethernet{spine}--spine{spine}:Ethernet{leaf}"


def comm_layout(nranks: int, hosts_per_leaf: int, seed: int) -> dict[str, tuple[int, ...]]:
    """Ring orders: a world ring in rank order, a second world ring in a shuffled order (as
    NCCL builds several rings), and one data-parallel ring per position within a leaf."""
    shuffled = list(range(nranks))
    random.Random(seed).shuffle(shuffled)
    layout = {"world": tuple(range(nranks)), "world-b": tuple(shuffled)}
    for g in range(min(hosts_per_leaf, nranks)):
        members = tuple(range(g, nranks, hosts_per_leaf))
        if len(members) >= 3:
            layout[f"dp{g}"] = members
    return layout


def ring_edges(order: tuple[int, ...]) -> list[Connection]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def _spines_for(seed: int, conn: Connection, spines: int) -> list[int]:
    """A connection's flows take distinct spines, in a per-connection order (like hashing)."""
    digest = hashlib.sha256(f"{seed}|{conn[0]}|{conn[1]}".encode()).digest()
    order = list(range(spines))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def flow(src: int, dst: int, channel: int, hosts_per_leaf: int, spines: int, seed: int) -> PlannedFlow:
    src_leaf, dst_leaf = src // hosts_per_leaf, dst // hosts_per_leaf
    src_port, dst_port = port_name(src), port_name(dst)
    if src_leaf == dst_leaf:
        path: tuple[str, ...] = (src_port, f"leaf{src_leaf}", dst_port)
        links: tuple[str, ...] = (host_link(src, hosts_per_leaf), host_link(dst, hosts_per_leaf))
    else:
        spine = _spines_for(seed, (src, dst), spines)[channel % spines]
        path = (src_port, f"leaf{src_leaf}", f"spine{spine}", f"leaf{dst_leaf}", dst_port)
        links = (host_link(src, hosts_per_leaf), fabric_link(src_leaf, spine),
                 fabric_link(dst_leaf, spine), host_link(dst, hosts_per_leaf))
    return PlannedFlow(host_name(src), src_port, host_name(dst), dst_port, path, links,
                       SPORT_BASE + channel)


def build_routes(
    job: str, nranks: int, hosts_per_leaf: int, spines: int, channels: int,
    comms: dict[str, tuple[int, ...]], seed: int,
) -> JobRoutes:
    conns = sorted({edge for order in comms.values() for edge in ring_edges(order)})
    table = {
        (s, d): tuple(flow(s, d, c, hosts_per_leaf, spines, seed) for c in range(channels))
        for s, d in conns
    }
    return JobRoutes(job, {r: host_name(r) for r in range(nranks)}, table)


def _crosses(planned: PlannedFlow, fault: Fault) -> bool:
    if fault.target in (planned.src_port, planned.dst_port):
        return True
    return any(link == fault.target and fault.direction in ("", direction)
               for link, direction in planned.directed_links())


def flow_factor(planned: PlannedFlow, faults: tuple[Fault, ...], at_us: int, start_us: int) -> float:
    """Rate multiplier of a flow at a time: the product of the slow faults active then."""
    factor = 1.0
    for fault in faults:
        active = fault.active(at_us, start_us)
        if fault.kind in ("slow_nic_port", "slow_link") and active and _crosses(planned, fault):
            factor *= fault.factor
    return factor


def dead_from_us(planned: PlannedFlow, faults: tuple[Fault, ...], start_us: int) -> int | None:
    """When a comm_hang fault kills this flow (absolute time), if ever."""
    onsets = [start_us + int(f.onset_s * 1_000_000) for f in faults
              if f.kind == "comm_hang" and _crosses(planned, f)]
    return min(onsets) if onsets else None
