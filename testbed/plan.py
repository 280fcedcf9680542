"""The address plan and naming of a testbed fabric: a `FabricSpec` in, a `Plan` out.

Pure: no subprocess, no file, no clock. `Plan` says every name, address, seed and rate the
kernel will be given; `commands` turns it into `ip`/`tc`/`nft` batches and `document` into an
API.md topology document, so the document and the kernel come from one value.

Worked example, `FabricSpec(leaves=2, spines=2, hosts_per_leaf=1, dual_tor=True)` with
management network 198.18.0.0/20 and prefix `c4tb`:

- namespaces `c4tb-leaf0`, `c4tb-leaf1`, `c4tb-spine0`, `c4tb-spine1`, `c4tb-host0`,
  `c4tb-host1`, and `c4tb-mgmt` (the management bridge);
- leaf0's uplinks `Ethernet0` (to spine0) and `Ethernet1` (to spine1) carry 100.64.0.0/31 and
  100.64.0.2/31; the spines' ends are `.1` and `.3` on their `Ethernet0` (one port per leaf);
- host0's NIC `mlx5_0` has port `p0` (interface `p0` in `c4tb-host0`) on leaf0's `Ethernet2`
  with 10.1.0.2, and port `p1` on leaf1's `Ethernet3` with 10.2.1.2; host1's p0 is 10.2.0.2 on
  leaf1 `Ethernet2` and its p1 10.1.1.2 on leaf0 `Ethernet3`;
- management addresses: the root namespace's end is 198.18.0.1, then switches in order
  (leaf0 .2, leaf1 .3, spine0 .4, spine1 .5), then hosts (.6, .7).
"""

from __future__ import annotations

import ipaddress
import re
import zlib
from dataclasses import dataclass, field

PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,10}$")
DEFAULT_PREFIX = "c4tb"
MGMT_NS = "mgmt"  # reserved node name: the management bridge namespace
NIC = "mlx5_0"
GATEWAY = "169.254.0.1"  # the anycast gateway every leaf answers on its host-facing ports
LINK_BASE = ipaddress.IPv4Address("100.64.0.0")
# The shim's fixed listen port (nccl_shim/src/c4_rt.h C4_DEFAULT_SHIM_PORT): the destination
# port of every data flow, so the fabric document names it as the probed protocol's port.
SHIM_PORT = 4792


class PlanError(ValueError):
    """A spec or prefix the testbed cannot build; the message names the field."""


def check_prefix(prefix: str) -> str:
    if not PREFIX_RE.match(prefix):
        raise PlanError(f"prefix {prefix!r}: 1-11 characters, a lower-case letter then letters or "
                        "digits (no '-', so no prefix is the start of another's namespaces)")
    return prefix


@dataclass(frozen=True, slots=True)
class FabricSpec:
    """What `c4-testbed up` builds: a 2-tier leaf-spine fabric."""

    leaves: int = 4
    spines: int = 4
    hosts_per_leaf: int = 4
    dual_tor: bool = False
    rate_mbit: int = 100  # every link, each direction (the shaped rate)
    seed: int = 1  # per-switch ECMP hash seeds derive from it
    mtu: int = 9000
    ecn_threshold_pkts: int = 16  # mark CE once the egress queue exceeds this many packets
    buffer_bytes: int = 1_000_000  # drop-tail limit of each egress queue
    shim_port: int = SHIM_PORT
    name: str = "testbed"

    def check(self) -> FabricSpec:
        limits = {"leaves": (1, 254), "spines": (1, 250), "hosts_per_leaf": (1, 120),
                  "rate_mbit": (1, 100_000), "mtu": (1280, 9000), "ecn_threshold_pkts": (1, 100_000),
                  "buffer_bytes": (20_000, 1 << 30), "shim_port": (1, 65535), "seed": (0, 2**31)}
        for what, (lo, hi) in limits.items():
            value = getattr(self, what)
            if not lo <= value <= hi:
                raise PlanError(f"{what} = {value}: must be between {lo} and {hi}")
        if self.dual_tor and self.leaves % 2:
            raise PlanError(f"leaves = {self.leaves}: dual-ToR pairs leaves 0-1, 2-3, ...; use an even count")
        return self


@dataclass(frozen=True, slots=True)
class End:
    """One end of a veth pair: an interface `ifname` in node `node`'s namespace."""

    node: str
    ifname: str
    address: str | None = None  # with the prefix length, e.g. "100.64.0.0/31"

    @property
    def ip(self) -> str | None:
        return self.address.split("/")[0] if self.address else None


@dataclass(frozen=True, slots=True)
class LinkPlan:
    """A shaped data-plane link. `a` is the leaf (or the host port), `b` the spine (or leaf)."""

    name: str  # canonical name, as in the fabric document
    a: End
    b: End
    rate_mbit: int
    host_link: bool

    @property
    def a_node(self) -> str:
        """The `a` endpoint as the document names it: a switch, or a host port `host:nic:port`."""
        return self.name.split("--")[0] if self.host_link else self.a.node


@dataclass(frozen=True, slots=True)
class PortPlan:
    host: str
    nic: str
    name: str  # port name in the document, and the interface name in the host's namespace
    address: str
    leaf: str
    leaf_port: str

    @property
    def node(self) -> str:
        return f"{self.host}:{self.nic}:{self.name}"


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    name: str
    role: str  # leaf | spine
    index: int  # position among leaves, or among spines
    ecmp_seed: int
    mgmt_address: str


@dataclass(frozen=True, slots=True)
class HostPlan:
    name: str
    home_leaf: str
    ports: tuple[PortPlan, ...]
    mgmt_address: str


@dataclass(frozen=True, slots=True)
class Plan:
    spec: FabricSpec
    prefix: str
    mgmt_net: str  # e.g. "198.18.16.0/20"
    switches: tuple[SwitchPlan, ...]
    hosts: tuple[HostPlan, ...]
    links: tuple[LinkPlan, ...]
    _by_name: dict[str, LinkPlan] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({link.name: link for link in self.links})

    @property
    def leaves(self) -> tuple[SwitchPlan, ...]:
        return tuple(s for s in self.switches if s.role == "leaf")

    @property
    def spines(self) -> tuple[SwitchPlan, ...]:
        return tuple(s for s in self.switches if s.role == "spine")

    def netns(self, node: str) -> str:
        """The namespace of a switch, a host or the management bridge (`mgmt`)."""
        return f"{self.prefix}-{node}"

    @property
    def mgmt_gateway(self) -> str:
        """The root namespace's address on the management network (where a controller listens)."""
        return str(ipaddress.ip_network(self.mgmt_net)[1])

    @property
    def root_ifname(self) -> str:
        return f"{self.prefix}-mg"

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.switches) + tuple(h.name for h in self.hosts)

    def switch(self, name: str) -> SwitchPlan:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)

    def host(self, name: str) -> HostPlan:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def link(self, name: str) -> LinkPlan:
        """A link by its canonical name (the document's `name`)."""
        return self._by_name[name]

    def link_between(self, x: str, y: str) -> LinkPlan:
        """The link joining two switches, or a host port node (`host:nic:port`) and its leaf."""
        for link in self.links:
            if {link.a_node, link.b.node} == {x, y}:
                return link
        raise KeyError(f"{x}--{y}")

    def port_by_address(self, address: str) -> PortPlan:
        for h in self.hosts:
            for p in h.ports:
                if p.address == address:
                    return p
        raise KeyError(address)

    def leaf_subnet(self, leaf: SwitchPlan) -> str:
        return f"10.{leaf.index + 1}.0.0/16"


def switch_seed(seed: int, name: str) -> int:
    """The kernel hash seed of one switch: non-zero (0 would mean 'kernel random'), 32-bit."""
    return zlib.crc32(f"{seed}|{name}".encode()) or 1


def mgmt_address(mgmt_net: str, index: int) -> str:
    """Address `index` of the management network: 0 is the root namespace's gateway."""
    net = ipaddress.ip_network(mgmt_net)
    if index + 2 >= net.num_addresses:
        raise PlanError(f"management network {mgmt_net} is too small for {index + 1} nodes")
    return str(net[index + 1])


def make_plan(spec: FabricSpec, prefix: str, mgmt_net: str) -> Plan:
    from controller.topology.names import link_name, port_node

    spec.check()
    check_prefix(prefix)
    leaves = [SwitchPlan(f"leaf{i}", "leaf", i, switch_seed(spec.seed, f"leaf{i}"),
                         mgmt_address(mgmt_net, 1 + i)) for i in range(spec.leaves)]
    spines = [SwitchPlan(f"spine{j}", "spine", j, switch_seed(spec.seed, f"spine{j}"),
                         mgmt_address(mgmt_net, 1 + spec.leaves + j)) for j in range(spec.spines)]
    links: list[LinkPlan] = []
    for i, leaf in enumerate(leaves):
        for j, spine in enumerate(spines):
            k = i * spec.spines + j
            a = End(leaf.name, f"Ethernet{j}", f"{LINK_BASE + 2 * k}/31")
            b = End(spine.name, f"Ethernet{i}", f"{LINK_BASE + 2 * k + 1}/31")
            links.append(LinkPlan(link_name(a.node, a.ifname, b.node, b.ifname), a, b,
                                  spec.rate_mbit, host_link=False))
    # p0 ports first, then p1 ports, so each leaf numbers its home hosts before its partner's.
    next_port = {leaf.name: spec.spines for leaf in leaves}
    host_ports: dict[int, list[PortPlan]] = {}
    for p in range(2 if spec.dual_tor else 1):
        for i in range(len(leaves)):
            leaf = leaves[i ^ p]
            for k in range(spec.hosts_per_leaf):
                h = i * spec.hosts_per_leaf + k
                name = f"host{h}"
                address = f"10.{leaf.index + 1}.{p}.{k + 2}"
                leaf_port = f"Ethernet{next_port[leaf.name]}"
                next_port[leaf.name] += 1
                port = PortPlan(name, NIC, f"p{p}", address, leaf.name, leaf_port)
                host_ports.setdefault(h, []).append(port)
                links.append(LinkPlan(link_name(port_node(name, NIC, port.name), "", leaf.name, leaf_port),
                                      End(name, port.name, f"{address}/32"),
                                      End(leaf.name, leaf_port, f"{GATEWAY}/32"),
                                      spec.rate_mbit, host_link=True))
    base = 1 + spec.leaves + spec.spines
    hosts = [HostPlan(f"host{h}", leaves[h // spec.hosts_per_leaf].name, tuple(ports),
                      mgmt_address(mgmt_net, base + h)) for h, ports in sorted(host_ports.items())]
    return Plan(spec, prefix, mgmt_net, (*leaves, *spines), tuple(hosts), tuple(links))
