"""Response schemas of ingest (telemetry, probes) and health."""

from __future__ import annotations

from pydantic import Field

from controller.api.schemas.public.base import Public, instant


class Accepted(Public):
    accepted: int = Field(description="Records (or samples) accepted.")


class ProbesAccepted(Public):
    accepted: int = Field(description="Probe results accepted.")
    learned: int = Field(description="Results whose hops mapped to a path of the fabric.")


class ProbeRequestPublic(Public):
    src_address: str
    dst_address: str
    protocol: str
    dst_port: int


class ProbeRequestsPublic(Public):
    requests: list[ProbeRequestPublic]


class SwitchPortPublic(Public):
    switch: str
    port: str
    t_us: int = Field(description="When the latest sample was taken.")
    t: str | None = instant("t_us")
    counters: dict[str, int | float] = Field(description="The latest raw counters, flattened.")
    rates_per_s: dict[str, float] = Field(description="Per-second rates over the last two samples.")
    oper_status: str | None = Field(None, description="IF-MIB ifOperStatus of the latest sample that carried "
                                                      "one (`up`, `down`, `lowerLayerDown`, ...).")


class SwitchPortsPublic(Public):
    ports: list[SwitchPortPublic]


class Liveness(Public):
    status: str = Field(examples=["ok"])
    version: str


class Readiness(Public):
    status: str = Field(description="`ready` or `not_ready` (then the status is 503).")
    checks: dict[str, str] = Field(description="database, migrations, leader, and the workers' states.")


class RateCellPublic(Public):
    src: int = Field(description="Sending rank.")
    dst: int = Field(description="Receiving rank.")
    ratio: float = Field(description="Median over the window of this connection's rate / its peers' median rate.")
    collectives: int = Field(description="Collectives the median is taken over.")


class RateCommPublic(Public):
    comm: str
    sources: dict[str, int] = Field(description="How many collectives each rate source gave (network time "
                                                "where reported, else the span).")
    cells: list[RateCellPublic]


class RateMatrixPublic(Public):
    job: str
    comms: list[RateCommPublic]
