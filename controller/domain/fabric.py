"""Value types of the fabric: switches, links, hosts, NICs and their ports.

Frozen dataclasses only: no I/O, no validation beyond what the types say (the rules that
make a fabric valid live in `controller.topology.validate`).

A two-leaf, one-spine fabric with one dual-port host reads::

    Fabric(name="tiny", hashing=Hashing(),
           switches=(Switch("leaf0", "leaf"), Switch("leaf1", "leaf"), Switch("spine0", "spine")),
           links=(Link("leaf0:Ethernet0--spine0:Ethernet0", "leaf0", "Ethernet0", "spine0",
                       "Ethernet0", 400.0), ...),
           hosts=(Host("host0", (Nic("mlx5_0", 0, (
               HostPort("p0", "10.0.0.2", "leaf0", "Ethernet32", 200.0),
               HostPort("p1", "10.0.128.2", "leaf1", "Ethernet32", 200.0))),)),))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

ROCE_DST_PORT = 4791
ROCE_SPORT_MIN = 49152
ROCE_SPORT_MAX = 65535


class SwitchRole(StrEnum):
    LEAF = "leaf"
    SPINE = "spine"
    CORE = "core"


class LinkState(StrEnum):
    UP = "up"
    DOWN = "down"
    DRAINED = "drained"


class HashingMode(StrEnum):
    MODEL = "model"
    PROBED = "probed"


@dataclass(frozen=True, slots=True)
class Hashing:
    """How switches spread flows: a named hash model, or paths learned from probes."""

    mode: HashingMode = HashingMode.MODEL
    model: str = "c4-ref-v1"
    protocol: str = "udp"
    dst_port: int = ROCE_DST_PORT


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    role: SwitchRole
    pod: int | None = None
    ecmp_seed: int = 0
    mgmt_address: str | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """A full-duplex link; each direction has the whole `capacity_gbps`.

    Switch-to-switch links come from the document; a host port's own link has `a` set to
    the port's `host:nic:port` name and an empty `a_port`.
    """

    name: str
    a: str
    a_port: str
    b: str
    b_port: str
    capacity_gbps: float
    a_address: str | None = None
    b_address: str | None = None
    state: LinkState = LinkState.UP
    is_host_link: bool = False


@dataclass(frozen=True, slots=True)
class HostPort:
    name: str
    address: str
    switch: str
    switch_port: str
    capacity_gbps: float


@dataclass(frozen=True, slots=True)
class Nic:
    name: str
    rail: int = 0
    ports: tuple[HostPort, ...] = ()

    @property
    def capacity_gbps(self) -> float:
        return sum(p.capacity_gbps for p in self.ports)


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    nics: tuple[Nic, ...] = ()


@dataclass(frozen=True, slots=True)
class PortRef:
    """One host port seen from the fabric: names, address and the leaf it hangs off."""

    host: str
    nic: str
    port: str
    address: str
    switch: str
    switch_port: str
    capacity_gbps: float

    @property
    def node(self) -> str:
        """The port's node name in the fabric graph and in link names: `host:nic:port`."""
        return f"{self.host}:{self.nic}:{self.port}"


@dataclass(frozen=True, slots=True)
class Fabric:
    """A whole fabric. Link states live on the links; `links` includes host-port links."""

    name: str
    hashing: Hashing = field(default_factory=Hashing)
    switches: tuple[Switch, ...] = ()
    links: tuple[Link, ...] = ()
    hosts: tuple[Host, ...] = ()

    def ports(self) -> tuple[PortRef, ...]:
        return tuple(
            PortRef(h.name, n.name, p.name, p.address, p.switch, p.switch_port, p.capacity_gbps)
            for h in self.hosts
            for n in h.nics
            for p in n.ports
        )
