"""Response schemas of the console's own endpoints (`/console/api/...`), for OpenAPI and checks."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SessionPublic(BaseModel):
    """Who the bearer token is: the console enables only the actions this role may take."""

    role: Literal["admin", "scheduler", "agent", "viewer"]
    may: list[str] = Field(description="Actions this role may take: `links` (PATCH /v1/links), `hosts` "
                                       "(isolate/release), `alarms` (acknowledge/resolve), `jobs`.")


class FlowPath(BaseModel):
    channel: int
    qp: int
    src_port: str | None = Field(description="`host:nic:port` the flow leaves by")
    dst_port: str | None
    udp_sport: int | None
    weight: float | None
    path: list[str] = Field(description="Nodes the flow crosses, as in the assignments")
    links: list[str] = Field(description="Link names in order")


class Connection(BaseModel):
    src_rank: int
    dst_rank: int
    src_host: str
    dst_host: str
    flows: list[FlowPath]


class ConnectionsPublic(BaseModel):
    job: str
    version: int
    status: str | None
    connections: list[Connection]


class LayoutBlock(BaseModel):
    id: str
    label: str
    switches: list[str]


class LayoutRow(BaseModel):
    role: str
    blocks: list[LayoutBlock]


class LayoutGroup(BaseModel):
    id: str
    label: str
    pod: int | None
    switches: list[str]


class Layout(BaseModel):
    flat: bool
    rows: list[LayoutRow]
    groups: list[LayoutGroup]
    group_roles: list[str]


class SwitchColumns(BaseModel):
    name: list[str]
    role: list[str]
    pod: list[int | None]


class LinkColumns(BaseModel):
    name: list[str]
    a: list[str]
    b: list[str]
    state: list[str]
    capacity_gbps: list[float]
    host_link: list[int]
    planned: list[list[float]] = Field(description="Planned utilization [ab, ba] of each link")
    flows: list[list[int]] = Field(description="Planned flows [ab, ba] of each link")
    measured: list[list[list[float | int | None] | None] | None] = Field(
        description="null, or [ab, ba] with each null or [utilization, ecn_marks_per_s, "
                    "pfc_pauses_per_s over all priorities, congested 0/1, t_us]")


class FabricStatePublic(BaseModel):
    """The map's whole state in columns (see controller/console/views.py)."""

    fabric: str
    revision: int
    measured: bool = Field(description="Whether any link carries a measurement")
    layout: Layout
    switches: SwitchColumns
    links: LinkColumns
    jobs: dict[str, int] = Field(description="Active jobs and their assignment versions")
