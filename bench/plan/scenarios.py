"""Benchmark scenarios: fabrics, jobs and failed links, built deterministically from a seed.

Each scenario is a fabric (after its failures) and a list of (job name, spec). Rings run per
rail (NIC index) over the job's hosts in a seeded shuffled order, as NCCL's rings cross hosts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from controller.domain.fabric import Fabric, LinkState
from controller.domain.jobs import JobSpec, Pattern, RankSpec, TrafficSpec
from controller.topology.build import with_link_state
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine


@dataclass(frozen=True)
class Scenario:
    name: str
    fabric: Fabric
    jobs: list[tuple[str, JobSpec]]


def ring_job(name: str, fabric: Fabric, hosts: list[str], channels: int, qps: int, seed: int,
             pattern: Pattern = Pattern.RING) -> JobSpec:
    nics = sorted(n.name for n in next(h for h in fabric.hosts if h.name == hosts[0]).nics)
    order = list(hosts)
    random.Random(seed).shuffle(order)
    ranks: list[RankSpec] = []
    traffic: list[TrafficSpec] = []
    for ni, nic in enumerate(nics):
        members = []
        for h in order:
            ranks.append(RankSpec(len(ranks), h, nic))
            members.append(len(ranks) - 1)
        traffic.append(TrafficSpec(pattern, tuple(members), channels=channels, qps_per_connection=qps))
        del ni
    return JobSpec(name, tuple(ranks), tuple(traffic))


def fail(fabric: Fabric, count: int, seed: int) -> Fabric:
    names = sorted(link.name for link in fabric.links if not link.is_host_link)
    for name in random.Random(seed).sample(names, count):
        fabric = with_link_state(fabric, name, LinkState.DOWN)
    return fabric


def hosts(fabric: Fabric) -> list[str]:
    return [h.name for h in fabric.hosts]


def quality() -> list[Scenario]:
    ls = leaf_spine(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4))
    ls_over = leaf_spine(LeafSpineSpec(leaves=8, spines=2, hosts_per_leaf=4, name="leaf-spine-2to1"))
    c3 = clos3(Clos3Spec(pods=4, leaves_per_pod=4, spines_per_pod=4, cores=16, hosts_per_leaf=4))
    c3_over = clos3(Clos3Spec(pods=4, leaves_per_pod=4, spines_per_pod=4, cores=8, hosts_per_leaf=4,
                              name="clos3-2to1"))
    out = []
    for fab, tag in ((ls, "leaf-spine"), (ls_over, "leaf-spine 2:1"), (c3, "clos3"), (c3_over, "clos3 2:1")):
        h = hosts(fab)
        out.append(Scenario(f"{tag}, 1 job", fab, [("a", ring_job("a", fab, h, 2, 2, 1))]))
        failed = fail(fab, 3, 7)
        out.append(Scenario(f"{tag}, 3 links down, 1 job", failed, [("a", ring_job("a", failed, h, 2, 2, 1))]))
        half = len(h) // 2
        out.append(Scenario(f"{tag}, 3 jobs", fab, [
            ("a", ring_job("a", fab, h[:half], 2, 2, 2)),
            ("b", ring_job("b", fab, h[half:], 1, 4, 3)),
            ("c", ring_job("c", fab, h[::3], 1, 2, 4))]))
        out.append(Scenario(f"{tag}, 3 links down, 3 jobs", failed, [
            ("a", ring_job("a", failed, h[:half], 2, 2, 2)),
            ("b", ring_job("b", failed, h[half:], 1, 4, 3)),
            ("c", ring_job("c", failed, h[::3], 1, 2, 4))]))
    a2a = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=4, name="leaf-spine-a2a"))
    out.append(Scenario("leaf-spine 2:1, alltoall", a2a,
                        [("a", ring_job("a", a2a, hosts(a2a), 1, 2, 5, Pattern.ALLTOALL))]))
    return out


def scale_fabric() -> Fabric:
    """A non-blocking 4-pod clos3: 128 hosts with 4 dual-port 2x200G NICs (512 NICs), 1600G fabric
    links, 32 equal-cost paths between pods."""
    return clos3(Clos3Spec(pods=4, leaves_per_pod=8, spines_per_pod=4, cores=32, hosts_per_leaf=4,
                           nics_per_host=4, fabric_gbps=1600.0, name="clos3-scale"))


SCALE_SERIES = ((8, 8, 4), (32, 8, 4), (128, 8, 4), (128, 16, 8))  # hosts, channels, QPs


def scale_job(fabric: Fabric, n_hosts: int, channels: int, qps: int) -> JobSpec:
    """4 per-rail rings over n_hosts hosts spread over the pods: 4 * n_hosts * channels * qps flows."""
    every = hosts(fabric)
    return ring_job("big", fabric, every[:: len(every) // n_hosts][:n_hosts], channels, qps, 11)
