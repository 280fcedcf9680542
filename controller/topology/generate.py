"""Standard fabrics: two-tier leaf-spine and three-tier Clos, with dual-ToR NICs.

Numbering, so that documents are predictable:
- `hosts_per_leaf` hosts have each leaf as their home leaf (`hosts = leaves * hosts_per_leaf`).
  With `ports_per_nic == 2` a NIC's port p0 goes to its home leaf and p1 to the home leaf's
  dual-ToR partner (leaves are paired 0-1, 2-3, ...).
- Leaf uplinks are `Ethernet0..`, host-facing ports follow them. Spines' downlinks come
  first, then their core uplinks.
- Host port p of NIC n on host h gets `10.{64*p}.0.0 + 4*(h*nics + n) + 2`; switch-to-switch
  links get /31s from 100.64.0.0; management addresses come from 198.18.0.0.
- In `clos3`, spine j of every pod joins core plane j (cores `j*C/S .. (j+1)*C/S - 1`) when
  the cores divide evenly into `spines_per_pod` planes, and every core otherwise.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from controller.domain.fabric import Fabric, Hashing, Host, HostPort, Link, Nic, Switch, SwitchRole
from controller.topology.build import build_fabric

_HOST_BASE = int(ipaddress.IPv4Address("10.0.0.0"))
_LINK_BASE = int(ipaddress.IPv4Address("100.64.0.0"))
_MGMT_BASE = int(ipaddress.IPv4Address("198.18.0.0"))


@dataclass(frozen=True, slots=True)
class LeafSpineSpec:
    leaves: int = 8
    spines: int = 4
    hosts_per_leaf: int = 4
    nics_per_host: int = 1
    ports_per_nic: int = 2
    host_gbps: float = 200.0
    fabric_gbps: float = 400.0
    name: str = "leaf-spine"


@dataclass(frozen=True, slots=True)
class Clos3Spec:
    pods: int = 4
    leaves_per_pod: int = 4
    spines_per_pod: int = 4
    cores: int = 8
    hosts_per_leaf: int = 4
    nics_per_host: int = 1
    ports_per_nic: int = 2
    host_gbps: float = 200.0
    fabric_gbps: float = 400.0
    name: str = "clos3"


class _Builder:
    def __init__(self) -> None:
        self.switches: list[Switch] = []
        self.links: list[Link] = []
        self.next_port: dict[str, int] = {}

    def switch(self, name: str, role: SwitchRole, pod: int | None) -> str:
        index = len(self.switches)
        self.switches.append(Switch(name, role, pod, ecmp_seed=index + 1,
                                    mgmt_address=str(ipaddress.IPv4Address(_MGMT_BASE + index + 1))))
        self.next_port[name] = 0
        return name

    def port(self, switch: str) -> str:
        n = self.next_port[switch]
        self.next_port[switch] = n + 1
        return f"Ethernet{n}"

    def link(self, a: str, b: str, capacity_gbps: float) -> None:
        k = len(self.links)
        self.links.append(Link("", a, self.port(a), b, self.port(b), capacity_gbps,
                               a_address=str(ipaddress.IPv4Address(_LINK_BASE + 2 * k)),
                               b_address=str(ipaddress.IPv4Address(_LINK_BASE + 2 * k + 1))))


def size(spec: LeafSpineSpec | Clos3Spec) -> tuple[int, int]:
    """(switches, links) of the fabric `spec` makes, links counting host ports and switch-to-switch
    links, computed without building it (so a request can be refused before any work).

    >>> size(LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4, nics_per_host=1, ports_per_nic=2))
    (12, 96)
    """
    if isinstance(spec, LeafSpineSpec):
        leaves, switches, fabric_links = spec.leaves, spec.leaves + spec.spines, spec.leaves * spec.spines
    else:
        leaves = spec.pods * spec.leaves_per_pod
        planes = spec.cores % spec.spines_per_pod == 0
        per_spine = spec.cores // spec.spines_per_pod if planes else spec.cores
        switches = spec.pods * (spec.leaves_per_pod + spec.spines_per_pod) + spec.cores
        fabric_links = leaves * spec.spines_per_pod + spec.pods * spec.spines_per_pod * per_spine
    host_ports = leaves * spec.hosts_per_leaf * spec.nics_per_host * spec.ports_per_nic
    return switches, fabric_links + host_ports


def _check(**counts: int) -> None:
    for what, n in counts.items():
        if n < 1:
            raise ValueError(f"{what} must be at least 1")


def _hosts(b: _Builder, leaves: list[str], hosts_per_leaf: int, nics: int, ports: int, gbps: float) -> list[Host]:
    if ports not in (1, 2):
        raise ValueError("ports_per_nic must be 1 or 2")
    if ports == 2 and len(leaves) % 2:
        raise ValueError("dual-port NICs need an even number of leaves (dual-ToR pairs)")
    hosts = []
    for li, leaf in enumerate(leaves):
        partner = leaves[li ^ 1] if ports == 2 else leaf
        for k in range(hosts_per_leaf):
            h = li * hosts_per_leaf + k
            nic_list = []
            for n in range(nics):
                port_list = []
                for p, sw in enumerate((leaf, partner)[:ports]):
                    addr = ipaddress.IPv4Address(_HOST_BASE + (64 * p << 16) + 4 * (h * nics + n) + 2)
                    port_list.append(HostPort(f"p{p}", str(addr), sw, b.port(sw), gbps))
                nic_list.append(Nic(f"mlx5_{n}", rail=n, ports=tuple(port_list)))
            hosts.append(Host(f"host{h}", tuple(nic_list)))
    return hosts


def leaf_spine(spec: LeafSpineSpec) -> Fabric:
    _check(leaves=spec.leaves, spines=spec.spines, hosts_per_leaf=spec.hosts_per_leaf, nics_per_host=spec.nics_per_host)
    b = _Builder()
    leaves = [b.switch(f"leaf{i}", SwitchRole.LEAF, None) for i in range(spec.leaves)]
    spines = [b.switch(f"spine{i}", SwitchRole.SPINE, None) for i in range(spec.spines)]
    for leaf in leaves:
        for spine in spines:
            b.link(leaf, spine, spec.fabric_gbps)
    hosts = _hosts(b, leaves, spec.hosts_per_leaf, spec.nics_per_host, spec.ports_per_nic, spec.host_gbps)
    return build_fabric(spec.name, Hashing(), b.switches, b.links, hosts)


def clos3(spec: Clos3Spec) -> Fabric:
    _check(pods=spec.pods, leaves_per_pod=spec.leaves_per_pod, spines_per_pod=spec.spines_per_pod,
           cores=spec.cores, hosts_per_leaf=spec.hosts_per_leaf, nics_per_host=spec.nics_per_host)
    if spec.ports_per_nic == 2 and spec.leaves_per_pod % 2:
        raise ValueError("dual-port NICs need an even number of leaves per pod (dual-ToR pairs)")
    b = _Builder()
    leaves: list[str] = []
    pod_spines: list[list[str]] = []
    for p in range(spec.pods):
        pod_leaves = [b.switch(f"pod{p}-leaf{i}", SwitchRole.LEAF, p) for i in range(spec.leaves_per_pod)]
        leaves += pod_leaves
        pod_spines.append([b.switch(f"pod{p}-spine{j}", SwitchRole.SPINE, p) for j in range(spec.spines_per_pod)])
    cores = [b.switch(f"core{c}", SwitchRole.CORE, None) for c in range(spec.cores)]
    for p in range(spec.pods):
        for leaf in leaves[p * spec.leaves_per_pod:(p + 1) * spec.leaves_per_pod]:
            for spine in pod_spines[p]:
                b.link(leaf, spine, spec.fabric_gbps)
    planes = spec.cores % spec.spines_per_pod == 0
    per_plane = spec.cores // spec.spines_per_pod if planes else spec.cores
    for spines in pod_spines:
        for j, spine in enumerate(spines):
            plane = cores[j * per_plane:(j + 1) * per_plane] if planes else cores
            for core in plane:
                b.link(spine, core, spec.fabric_gbps)
    hosts = _hosts(b, leaves, spec.hosts_per_leaf, spec.nics_per_host, spec.ports_per_nic, spec.host_gbps)
    return build_fabric(spec.name, Hashing(), b.switches, b.links, hosts)
