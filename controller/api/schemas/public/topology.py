"""Response schemas of the fabric: the document, a stored fabric's summary, links with load.

A link with its planned load reads (`GET /v1/links/leaf0:Ethernet2--spine2:Ethernet0`)::

    {"name": "leaf0:Ethernet2--spine2:Ethernet0", "a": "leaf0", "a_port": "Ethernet2",
     "b": "spine2", "b_port": "Ethernet0", "capacity_gbps": 400.0, "state": "up", "host_link": false,
     "load": {"ab": {"planned_gbps": 200.0, "planned_utilization": 0.5, "flows": 4},
              "ba": {"planned_gbps": 0.0, "planned_utilization": 0.0, "flows": 0}},
     "max_planned_utilization": 0.5,
     "jobs": [{"job": "run7", "ab": {...}, "ba": {...}}]}
"""

from __future__ import annotations

from pydantic import Field

from controller.api.schemas.public.base import Public
from controller.domain.fabric import LinkState


class HashingPublic(Public):
    mode: str
    model: str | None = None
    protocol: str | None = None
    dst_port: int | None = None


class SwitchPublic(Public):
    name: str
    role: str
    pod: int | None = None
    ecmp_seed: int
    mgmt_address: str | None = None


class FabricLinkPublic(Public):
    name: str
    a: str
    a_port: str
    a_address: str | None = None
    b: str
    b_port: str
    b_address: str | None = None
    capacity_gbps: float
    state: LinkState


class PortPublic(Public):
    name: str
    address: str
    switch: str
    switch_port: str
    capacity_gbps: float
    link: str = Field(description="The port's link name.")
    state: LinkState = Field(description="The port's link state.")


class NicPublic(Public):
    name: str
    rail: int
    ports: list[PortPublic]


class HostDocPublic(Public):
    name: str
    nics: list[NicPublic]


class TopologyPublic(Public):
    """The fabric document with live link states; PUT it back unchanged to keep the fabric."""

    name: str
    hashing: HashingPublic
    switches: list[SwitchPublic]
    links: list[FabricLinkPublic]
    hosts: list[HostDocPublic]


class TopologySummary(Public):
    """What a stored fabric holds."""

    name: str
    revision: int = Field(description="Increases on every change of the fabric, link states included.")
    switches: int
    links: int = Field(description="Switch-to-switch links.")
    hosts: int
    host_ports: int


class DirectionLoad(Public):
    planned_gbps: float = Field(description="Summed demands of the planned flows crossing this direction.")
    planned_utilization: float = Field(description="`planned_gbps` / `capacity_gbps`.")
    flows: int


class LinkLoad(Public):
    ab: DirectionLoad = Field(description="From `a` to `b`.")
    ba: DirectionLoad = Field(description="From `b` to `a`.")


class LinkPublic(Public):
    """A link (switch-to-switch or a host port's) with its state; fields such as measured
    load are added by the parts that know them."""

    name: str
    a: str
    a_port: str
    b: str
    b_port: str
    capacity_gbps: float
    state: LinkState
    host_link: bool
    a_address: str | None = None
    b_address: str | None = None


class LinkWithLoadPublic(LinkPublic):
    load: LinkLoad
    max_planned_utilization: float


class LinksPublic(Public):
    links: list[LinkWithLoadPublic] = Field(description="Sorted by name.")


class JobShare(Public):
    job: str
    ab: DirectionLoad
    ba: DirectionLoad


class LinkDetailPublic(LinkWithLoadPublic):
    jobs: list[JobShare] = Field(description="Each job's part of the planned load, by job name.")


class LinkChangePublic(LinkPublic):
    replanned_flows: int = Field(description="Flows, over all jobs, whose assignment the change rewrote (path, NIC "
                                             "ports, source port or weight): the sum of the `changed_flows` of its "
                                             "`job.replanned` events.")
