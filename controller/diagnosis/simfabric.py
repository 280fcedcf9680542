"""The simulator's fabric, routes and faults (used by tests, bench and `c4 demo`).

Self-contained on purpose (it does not need the topology package): a 2-tier leaf-spine fabric
with one single-port NIC per host, host `host{h}` on leaf `leaf{h // hosts_per_leaf}`, and
hand-built routes in API.md's canonical link names. A job's rank r runs on host
`placement[r]` (rank r on host r by default), so several jobs can share one fabric. Each
connection has `flows` flows over distinct spines; flow i has source port `SPORT_BASE + i`
(as an assignment's `udp_sport`). Link directions are set from the path (which end of the
link the flow enters by), never parsed from names. Pure and deterministic; no I/O.

With 8 hosts per leaf and 2 spines, rank 3 -> rank 12 on its first flow crosses::

    host3:mlx5_0:p0--leaf0:Ethernet35 (ab), leaf0:Ethernet1--spine1:Ethernet0 (ab),
    leaf1:Ethernet1--spine1:Ethernet1 (ba), host12:mlx5_0:p0--leaf1:Ethernet36 (ba)
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from controller.diagnosis.routes import Connection, JobRoutes, PlannedFlow
from controller.domain.alarms import AlarmKind, Suspect, SuspectKind

FaultKind = Literal[
    "comm_hang", "noncomm_hang", "slow_nic_port", "slow_link", "noncomm_slow", "straggler"
]
SPORT_BASE = 49152


@dataclass(frozen=True, slots=True)
class Fault:
    """`target`: a rank number (noncomm_hang, noncomm_slow, straggler), a port name
    (slow_nic_port, or comm_hang on a port: a dead port) or a link name (slow_link, or
    comm_hang: a dead link). `direction` ("ab", "ba", "" for both) limits a link fault to one
    direction. `factor` multiplies rates (slow_*: 0.2) or compute time (noncomm_slow: 4)."""

    kind: FaultKind
    onset_s: float
    target: str
    direction: str = ""
    factor: float = 0.2
    end_s: float | None = None  # repaired then (rate faults only); None: never

    def window_us(self, start_us: int) -> tuple[int, int]:
        """[onset, end) in absolute (true) time."""
        end = 2**62 if self.end_s is None else start_us + int(self.end_s * 1_000_000)
        return start_us + int(self.onset_s * 1_000_000), end

    def active(self, at_us: int, start_us: int) -> bool:
        on, off = self.window_us(start_us)
        return on <= at_us < off

    def expected(self, fabric: SimFabric | None = None) -> tuple[AlarmKind, Suspect] | None:
        """The alarm kind and first suspect a correct diagnosis names; None for no alarm."""
        if self.kind == "straggler":
            return None
        if self.kind in ("noncomm_hang", "noncomm_slow"):
            rank = int(self.target)
            host = host_name(rank) if fabric is None else fabric.host(rank)
            return (AlarmKind(self.kind), Suspect(SuspectKind.HOST, host))
        is_link = "--" in self.target
        suspect = Suspect(SuspectKind.LINK if is_link else SuspectKind.NIC_PORT, self.target)
        kind = AlarmKind.COMM_HANG if self.kind == "comm_hang" else AlarmKind.COMM_SLOW
        return (kind, suspect)


def host_name(host: int) -> str:
    return f"host{host}"


def port_name(host: int) -> str:
    return f"host{host}:mlx5_0:p0"


def host_link(host: int, hosts_per_leaf: int) -> str:
    leaf = host // hosts_per_leaf
    return f"{port_name(host)}--leaf{leaf}:Ethernet{32 + host % hosts_per_leaf}"


def fabric_link(leaf: int, spine: int) -> str:
    return f"leaf{leaf}:Ethernet{spine}--spine{spine}:Ethernet{leaf}"


@dataclass(frozen=True, slots=True)
class SimFabric:
    """Where a job's ranks sit and how its connections are routed."""

    hosts_per_leaf: int
    spines: int
    seed: int
    placement: tuple[int, ...]  # host index of each rank

    def host_index(self, rank: int) -> int:
        return self.placement[rank]

    def host(self, rank: int) -> str:
        return host_name(self.placement[rank])

    def port(self, rank: int) -> str:
        return port_name(self.placement[rank])

    def flow(self, src: int, dst: int, index: int) -> PlannedFlow:
        """The planned route of flow `index` of connection src -> dst."""
        hs, hd = self.placement[src], self.placement[dst]
        src_leaf, dst_leaf = hs // self.hosts_per_leaf, hd // self.hosts_per_leaf
        sp, dp = port_name(hs), port_name(hd)
        up, down = host_link(hs, self.hosts_per_leaf), host_link(hd, self.hosts_per_leaf)
        if src_leaf == dst_leaf:
            path: tuple[str, ...] = (sp, f"leaf{src_leaf}", dp)
            links: tuple[str, ...] = (up, down)
            dirs: tuple[str, ...] = ("ab", "ba")
        else:
            spine = _spines_for(self.seed, (hs, hd), self.spines)[index % self.spines]
            path = (sp, f"leaf{src_leaf}", f"spine{spine}", f"leaf{dst_leaf}", dp)
            links = (up, fabric_link(src_leaf, spine), fabric_link(dst_leaf, spine), down)
            dirs = ("ab", "ab", "ba", "ba")
        return PlannedFlow(host_name(hs), sp, host_name(hd), dp, path, links, SPORT_BASE + index,
                           dirs)

    def routes(self, job: str, conns: Iterable[Connection], flows: int) -> JobRoutes:
        table = {c: tuple(self.flow(c[0], c[1], i) for i in range(flows))
                 for c in sorted(set(conns))}
        hosts = {r: self.host(r) for r in range(len(self.placement))}
        return JobRoutes(job, hosts, table)


def _spines_for(seed: int, hosts: tuple[int, int], spines: int) -> list[int]:
    """A connection's flows take distinct spines, in a per-connection order (like hashing)."""
    digest = hashlib.sha256(f"{seed}|{hosts[0]}|{hosts[1]}".encode()).digest()
    order = list(range(spines))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def ring_edges(order: tuple[int, ...]) -> list[Connection]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


@dataclass(frozen=True, slots=True)
class FlowFaults:
    """What the faults do to one flow: its rate is multiplied by `factor` during
    [on_us, off_us), and it carries nothing from `dead_us` on (absolute times)."""

    factor: float = 1.0
    on_us: int = 2**62
    off_us: int = 2**62
    dead_us: float = float("inf")


def _crosses(planned: PlannedFlow, fault: Fault) -> bool:
    if fault.target in (planned.src_port, planned.dst_port):
        return True
    return any(link == fault.target and fault.direction in ("", direction)
               for link, direction in planned.directed_links())


@dataclass(slots=True)
class FaultMap:
    """Per planned flow, the faults that touch it (memoised: flows repeat every collective)."""

    faults: tuple[Fault, ...]
    start_us: int
    _memo: dict[PlannedFlow, FlowFaults] = field(default_factory=dict)

    def of(self, planned: PlannedFlow) -> FlowFaults:
        got = self._memo.get(planned)
        if got is not None:
            return got
        factor, on, off, dead = 1.0, 2**62, 0, float("inf")
        for fault in self.faults:
            if not _crosses(planned, fault):
                continue
            f_on, f_off = fault.window_us(self.start_us)
            if fault.kind == "comm_hang":
                dead = min(dead, float(f_on))
            elif fault.kind in ("slow_nic_port", "slow_link"):
                # Several slow faults on one flow: their product over the widest window.
                factor *= fault.factor
                on, off = min(on, f_on), max(off, f_off)
        got = FlowFaults(factor, on, off if factor != 1.0 else 2**62, dead)
        self._memo[planned] = got
        return got
