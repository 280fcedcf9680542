"""Planned load per link direction, job by job: what `GET /v1/links`, the fabric map and the
per-job link table show. Pure: routes and demands in, loads out.

A flow's demand is API.md's (its source NIC's capacity over the flows that NIC sources in
all active jobs, `te.instance.demands_gbps`); a link direction's planned load is the sum of
the demands of the planned flows crossing it, and its utilization that load over the link's
capacity. Two flows of job "a" from host0's NIC over leaf0 -> spine1 give::

    planned_loads(view, {"a": [(("host0", "mlx5_0"), path), (("host0", "mlx5_0"), path)]},
                  {("host0", "mlx5_0"): 100.0})
    -> {"a": {("host0:mlx5_0:p0--leaf0:Ethernet32", "ab"): DirectionLoad(200.0, 2), ...}}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.te.candidates import DirectedLink, Nic
from controller.topology.graph import FabricView, Path


@dataclass(frozen=True, slots=True)
class DirectionLoad:
    """The planned load of one link direction: total demand and how many flows make it."""

    gbps: float
    flows: int


def planned_loads(view: FabricView, routes: Mapping[str, Iterable[tuple[Nic, Path]]],
                  demand: Mapping[Nic, float]) -> dict[str, dict[DirectedLink, DirectionLoad]]:
    """Per job, the load its planned flows (`(source NIC, path)` each) put on each link
    direction. Flows whose source NIC has no demand (not an active job's) add nothing."""
    directed: dict[Path, tuple[DirectedLink, ...]] = {}
    out: dict[str, dict[DirectedLink, DirectionLoad]] = {}
    for job, flows in routes.items():
        gbps: dict[DirectedLink, float] = defaultdict(float)
        count: dict[DirectedLink, int] = defaultdict(int)
        for nic, path in flows:
            d = demand.get(nic)
            if d is None:
                continue
            hops = directed.get(path)
            if hops is None:
                hops = directed[path] = view.directed_links_of(path)
            for hop in hops:
                gbps[hop] += d
                count[hop] += 1
        out[job] = {hop: DirectionLoad(gbps[hop], count[hop]) for hop in gbps}
    return out


def totals(per_job: Mapping[str, Mapping[DirectedLink, DirectionLoad]]) -> dict[DirectedLink, DirectionLoad]:
    """The loads of all jobs together, per link direction."""
    gbps: dict[DirectedLink, float] = defaultdict(float)
    count: dict[DirectedLink, int] = defaultdict(int)
    for loads in per_job.values():
        for hop, load in loads.items():
            gbps[hop] += load.gbps
            count[hop] += load.flows
    return {hop: DirectionLoad(gbps[hop], count[hop]) for hop in gbps}
