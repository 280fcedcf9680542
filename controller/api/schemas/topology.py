"""Request schemas of the topology endpoints; they turn documents into domain values."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Body
from pydantic import Field, ValidationInfo, field_validator

from controller.api.schemas.common import (
    INT32_MAX,
    LinkName,
    Name,
    PathName,
    PathPortName,
    PortName,
    Strict,
)
from controller.domain.fabric import (
    ROCE_DST_PORT,
    Fabric,
    Hashing,
    HashingMode,
    Host,
    HostPort,
    Link,
    LinkState,
    Nic,
    Switch,
    SwitchRole,
)
from controller.topology.build import build_fabric
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine, size
from controller.topology.names import port_node

Gbps = Annotated[float, Field(gt=0, le=1_000_000, description="Gbit/s, per direction")]
StateName = Literal["up", "down", "drained"]
MAX_GENERATED_HOSTS = 65536
ADDRESS_MAX = 64  # the address columns; an IPv6 address is at most 45 characters


class HashingCreate(Strict):
    mode: Literal["model", "probed"] = "model"
    model: str = Field("c4-ref-v1", min_length=1, max_length=64)
    protocol: Literal["udp", "tcp"] = "udp"
    dst_port: int = Field(ROCE_DST_PORT, ge=1, le=65535)


class SwitchCreate(Strict):
    name: Name
    role: Literal["leaf", "spine", "core"]
    pod: int | None = Field(None, ge=0, le=INT32_MAX)
    ecmp_seed: int = Field(0, ge=0, lt=2**63)
    mgmt_address: str | None = Field(None, min_length=1, max_length=ADDRESS_MAX)


class LinkCreate(Strict):
    name: LinkName | None = None
    a: Name
    a_port: PortName
    a_address: str | None = Field(None, min_length=1, max_length=ADDRESS_MAX)
    b: Name
    b_port: PortName
    b_address: str | None = Field(None, min_length=1, max_length=ADDRESS_MAX)
    capacity_gbps: Gbps
    state: StateName = "up"


class PortCreate(Strict):
    name: PathPortName
    address: str = Field(min_length=1, max_length=ADDRESS_MAX)
    switch: Name
    switch_port: PortName
    capacity_gbps: Gbps
    link: LinkName | None = Field(None, description="The port's link name; canonical when omitted.")
    state: StateName = "up"


class NicCreate(Strict):
    name: PathPortName
    rail: int = Field(0, ge=0, le=INT32_MAX)
    ports: list[PortCreate] = Field(min_length=1, max_length=8)


class HostCreate(Strict):
    name: PathName
    nics: list[NicCreate] = Field(min_length=1, max_length=64)


class TopologyCreate(Strict):
    name: Name
    hashing: HashingCreate = Field(default_factory=HashingCreate)
    switches: list[SwitchCreate] = Field(min_length=1)
    links: list[LinkCreate] = Field(default_factory=list)
    hosts: list[HostCreate] = Field(default_factory=list)

    def size(self) -> tuple[int, int, str]:
        """(switches, links counting host ports, the field to name when there are too many links)."""
        ports = sum(len(nic.ports) for host in self.hosts for nic in host.nics)
        return len(self.switches), len(self.links) + ports, "links" if len(self.links) >= ports else "hosts"

    def to_fabric(self) -> Fabric:
        h = self.hashing
        hashing = Hashing(HashingMode(h.mode), h.model, h.protocol, h.dst_port)
        switches = [Switch(s.name, SwitchRole(s.role), s.pod, s.ecmp_seed, s.mgmt_address) for s in self.switches]
        links = [
            Link(link.name or "", link.a, link.a_port, link.b, link.b_port, link.capacity_gbps,
                 link.a_address, link.b_address, LinkState(link.state))
            for link in self.links
        ]
        hosts, states, names = [], {}, {}
        for host in self.hosts:
            nics = []
            for nic in host.nics:
                ports = []
                for p in nic.ports:
                    node = port_node(host.name, nic.name, p.name)
                    states[node] = LinkState(p.state)
                    if p.link:
                        names[node] = p.link
                    ports.append(HostPort(p.name, p.address, p.switch, p.switch_port, p.capacity_gbps))
                nics.append(Nic(nic.name, nic.rail, tuple(ports)))
            hosts.append(Host(host.name, tuple(nics)))
        return build_fabric(self.name, hashing, switches, links, hosts, states, names)


class _HostsGenerate(Strict):
    """What both generators share: the hosts on each leaf and the link speeds."""

    hosts_per_leaf: int = Field(4, ge=1, le=512)
    nics_per_host: int = Field(1, ge=1, le=16)
    ports_per_nic: Literal[1, 2] = 2
    host_gbps: Gbps = 200.0
    fabric_gbps: Gbps = 400.0


def _check_leaves(field: str, leaves: int, info: ValidationInfo, pods: int = 1) -> None:
    if info.data.get("ports_per_nic") == 2 and leaves % 2:
        raise ValueError(f"{field} must be even with ports_per_nic 2 (dual-ToR pairs)")
    hosts = pods * leaves * info.data.get("hosts_per_leaf", 1)
    if hosts > MAX_GENERATED_HOSTS:
        raise ValueError(f"{hosts} hosts; at most {MAX_GENERATED_HOSTS} can be generated")


class LeafSpineGenerate(_HostsGenerate):
    kind: Literal["leaf-spine"]
    name: Name = "leaf-spine"
    leaves: int = Field(8, ge=1, le=4096)
    spines: int = Field(4, ge=1, le=1024)

    @field_validator("leaves")
    @classmethod
    def _dual_tor_pairs(cls, leaves: int, info: ValidationInfo) -> int:
        _check_leaves("leaves", leaves, info)
        return leaves

    def spec(self) -> LeafSpineSpec:
        return LeafSpineSpec(**self.model_dump(exclude={"kind"}))

    def size(self) -> tuple[int, int, str]:
        switches, links = size(self.spec())
        return switches, links, "hosts_per_leaf" if self.hosts_per_leaf * self.nics_per_host * self.ports_per_nic >= self.spines else "spines"

    def to_fabric(self) -> Fabric:
        return leaf_spine(self.spec())


class Clos3Generate(_HostsGenerate):
    kind: Literal["clos3"]
    name: Name = "clos3"
    pods: int = Field(4, ge=1, le=256)
    leaves_per_pod: int = Field(4, ge=1, le=256)
    spines_per_pod: int = Field(4, ge=1, le=256)
    cores: int = Field(8, ge=1, le=1024)

    @field_validator("leaves_per_pod")
    @classmethod
    def _dual_tor_pairs(cls, leaves: int, info: ValidationInfo) -> int:
        _check_leaves("leaves_per_pod", leaves, info, info.data.get("pods", 1))
        return leaves

    def spec(self) -> Clos3Spec:
        return Clos3Spec(**self.model_dump(exclude={"kind"}))

    def size(self) -> tuple[int, int, str]:
        switches, links = size(self.spec())
        return switches, links, "hosts_per_leaf" if self.hosts_per_leaf * self.nics_per_host * self.ports_per_nic >= self.spines_per_pod \
            else "cores"

    def to_fabric(self) -> Fabric:
        return clos3(self.spec())


GenerateRequest = Annotated[LeafSpineGenerate | Clos3Generate, Field(discriminator="kind")]
GenerateBody = Annotated[LeafSpineGenerate | Clos3Generate, Body(discriminator="kind")]


class LinkPatch(Strict):
    state: StateName
