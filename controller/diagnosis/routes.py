"""The planned paths of a job's connections, as C4D needs them to localise faults.

Built by the service from the job's assignments (API.md, `GET /v1/jobs/{name}/assignments`):
one `PlannedFlow` per assignment, grouped by (src_rank, dst_rank). Pure values; no I/O.

Rank 0 on host0 sending to rank 1 on host5 over one flow through spine1 reads::

    JobRoutes(job="gpt-22b-run7", rank_hosts={0: "host0", 1: "host5"}, connections={
        (0, 1): (PlannedFlow(src_host="host0", src_port="host0:mlx5_0:p0", dst_host="host5",
                             dst_port="host5:mlx5_0:p0",
                             path=("host0:mlx5_0:p0", "leaf0", "spine1", "leaf1", "host5:mlx5_0:p0"),
                             links=("host0:mlx5_0:p0--leaf0:Ethernet32",
                                    "leaf0:Ethernet1--spine1:Ethernet0",
                                    "leaf1:Ethernet1--spine1:Ethernet1",
                                    "host5:mlx5_0:p0--leaf1:Ethernet33")),)})

`directions` says, per link, whether the flow crosses it from the link's `a` end to its `b`
end ("ab") or back ("ba"); the service sets it from the fabric's link endpoints (never from
link names, which may be custom). Empty or "" when unknown: the link then counts in both
directions at once. `sport` (the assignment's `udp_sport`) matches a flow to the per-flow
progress of telemetry (`peers[].flows`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Connection = tuple[int, int]


@dataclass(frozen=True, slots=True)
class PlannedFlow:
    src_host: str
    src_port: str
    dst_host: str
    dst_port: str
    path: tuple[str, ...]
    links: tuple[str, ...]
    sport: int | None = None  # the flow's source port (assignment `udp_sport`), if known
    directions: tuple[str, ...] = ()  # per link: "ab", "ba" or "" (unknown)

    def directed_links(self) -> tuple[tuple[str, str], ...]:
        """(link name, direction) for each link crossed; "" when the direction is unknown."""
        if len(self.directions) != len(self.links):
            return tuple((link, "") for link in self.links)
        return tuple(zip(self.links, self.directions, strict=True))


def link_directions(
    path: tuple[str, ...], links: tuple[str, ...], ends: Mapping[str, tuple[str, str]]
) -> tuple[str, ...]:
    """Per link of a route, "ab" when the path enters it at its `a` end, "ba" at its `b` end,
    "" when the fabric does not say (`ends`: link name -> (a, b) node names; a host port's
    node is its `host:nic:port` name)."""
    if len(path) != len(links) + 1:
        return ("",) * len(links)
    out: list[str] = []
    for i, link in enumerate(links):
        a_b = ends.get(link)
        here, there = path[i], path[i + 1]
        if a_b == (here, there):
            out.append("ab")
        elif a_b == (there, here):
            out.append("ba")
        else:
            out.append("")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class JobRoutes:
    job: str
    rank_hosts: Mapping[int, str]
    connections: Mapping[Connection, tuple[PlannedFlow, ...]] = field(default_factory=dict)
