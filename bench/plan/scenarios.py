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
    # Shapes beyond the two generators' defaults: 16 spines, 8 NICs per host (per-rail
    # rings), a 3-tier fabric with a failure, and a hand-written one.
    wide = leaf_spine(LeafSpineSpec(leaves=8, spines=16, hosts_per_leaf=4, fabric_gbps=100.0, name="leaf-spine-16"))
    out.append(Scenario("leaf-spine 16 spines, 1 job", wide, [("a", ring_job("a", wide, hosts(wide), 2, 2, 6))]))
    rails = leaf_spine(LeafSpineSpec(leaves=8, spines=8, hosts_per_leaf=2, nics_per_host=8, name="leaf-spine-8nic"))
    out.append(Scenario("leaf-spine 8 NICs/host, 1 job", rails, [("a", ring_job("a", rails, hosts(rails), 1, 2, 7))]))
    big3 = fail(clos3(Clos3Spec(pods=4, leaves_per_pod=4, spines_per_pod=4, cores=16, hosts_per_leaf=4, nics_per_host=2,
                                name="clos3-2nic")), 2, 8)
    out.append(Scenario("clos3 2 NICs/host, 2 links down, 2 jobs", big3, [
        ("a", ring_job("a", big3, hosts(big3)[::2], 2, 2, 8)),
        ("b", ring_job("b", big3, hosts(big3)[1::2], 2, 2, 9))]))
    hand = hand_written()
    out.append(Scenario("hand-written (MLAG pairs, 3 tiers), 2 jobs", hand, [
        ("a", ring_job("a", hand, hosts(hand)[:8], 2, 2, 10)),
        ("b", ring_job("b", hand, hosts(hand)[4:], 1, 2, 11, Pattern.ALLTOALL))]))
    return out


def hand_written() -> Fabric:
    """A fabric no generator makes: two pods of two MLAG leaf pairs (100G peer links), pod 0
    with three spines and pod 1 with two, one spine of pod 0 missing a leaf, cores of mixed
    capacity (400G, 200G), single- and dual-port NICs, names of no pattern."""
    from controller.domain.fabric import Hashing, Host, HostPort, Link, Nic, Switch, SwitchRole
    from controller.topology.build import build_fabric

    sw: list[Switch] = []
    links: list[Link] = []
    port: dict[str, int] = {}

    def add(name: str, role: SwitchRole, pod: int | None) -> str:
        sw.append(Switch(name, role, pod, ecmp_seed=len(sw) * 7 + 3))
        port[name] = 0
        return name

    def join(a: str, b: str, gbps: float) -> None:
        links.append(Link("", a, f"et{port[a]}", b, f"et{port[b]}", gbps))
        port[a] += 1
        port[b] += 1

    cores = [add("x-core-a", SwitchRole.CORE, None), add("x-core-b", SwitchRole.CORE, None)]
    leaves = []
    for pod, n_spines in ((0, 3), (1, 2)):
        tors = [add(f"tor{pod}{c}", SwitchRole.LEAF, pod) for c in "abcd"]
        aggs = [add(f"agg-{pod}-{i}", SwitchRole.SPINE, pod) for i in range(n_spines)]
        join(tors[0], tors[1], 100.0)  # MLAG peer links
        join(tors[2], tors[3], 100.0)
        for t in tors:
            for i, a in enumerate(aggs):
                if not (pod == 0 and i == 2 and t == tors[3]):
                    join(t, a, 400.0)
        for a in aggs:
            for j, c in enumerate(cores):
                join(a, c, 400.0 if j == 0 else 200.0)
        leaves += tors
    hosts = []
    for i in range(16):
        home, pair = leaves[(i // 2) % 8], leaves[((i // 2) % 8) ^ 1]
        ports = [HostPort("p0", f"10.77.{i}.2", home, f"h{i}", 200.0)]
        if i % 3:  # two of three hosts have dual-ToR NICs
            ports.append(HostPort("p1", f"10.78.{i}.2", pair, f"h{i}", 200.0))
        hosts.append(Host(f"gpu-{i:02d}", (Nic("mlx5_0", 0, tuple(ports)),)))
    return build_fabric("hand-written", Hashing(), sw, links, hosts)


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


ALLTOALL_RANKS = (64, 128, 256)


def alltoall_fabric(kind: str, ranks: int) -> Fabric:
    """A non-blocking fabric of `ranks` hosts (one dual-port 2x200G NIC each): leaf-spine with
    8 hosts per leaf and 8 spines (400G), or clos3 with pods of 4 leaves x 8 hosts, 4 spines
    and 16 cores (800G)."""
    if kind == "leaf-spine":
        return leaf_spine(LeafSpineSpec(leaves=ranks // 8, spines=8, hosts_per_leaf=8, name=f"ls-a2a-{ranks}"))
    return clos3(Clos3Spec(pods=ranks // 32, leaves_per_pod=4, spines_per_pod=4, cores=16, hosts_per_leaf=8,
                           fabric_gbps=800.0, name=f"clos3-a2a-{ranks}"))


def alltoall_job(fabric: Fabric, ranks: int) -> JobSpec:
    """The MoE pattern: every ordered pair of `ranks` ranks, one flow each (ranks x (ranks - 1))."""
    return JobSpec("moe", tuple(RankSpec(i, h, "mlx5_0") for i, h in enumerate(hosts(fabric)[:ranks])),
                   (TrafficSpec(Pattern.ALLTOALL),))
