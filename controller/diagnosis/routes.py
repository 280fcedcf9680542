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

`path` may be empty when unknown; links then count in both directions at once. `sport` (the
assignment's `udp_sport`) matches a flow to the per-flow progress of telemetry (`peers[].flows`).
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

    def directed_links(self) -> tuple[tuple[str, str], ...]:
        """(link name, direction) for each link crossed; direction is "ab" when the flow goes
        from the name's first endpoint to its second, "ba" the other way, "" if unknown."""
        out: list[tuple[str, str]] = []
        for i, link in enumerate(self.links):
            direction = ""
            if len(self.path) == len(self.links) + 1:
                first = link.split("--", 1)[0]
                node = self.path[i]
                starts_here = first == node or first.startswith(node + ":")
                direction = "ab" if starts_here else "ba"
            out.append((link, direction))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class JobRoutes:
    job: str
    rank_hosts: Mapping[int, str]
    connections: Mapping[Connection, tuple[PlannedFlow, ...]] = field(default_factory=dict)
