"""Request schemas of the jobs and probes endpoints; unknown keys are refused (422)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from controller.api.schemas.common import PathName, Strict
from controller.domain.jobs import JobDiagnosis, JobSpec, Pattern, RankSpec, TrafficSpec

MAX_RANK = 2**31 - 1  # ranks are stored in 32-bit integer columns


class RankCreate(Strict):
    rank: int = Field(ge=0, le=MAX_RANK)
    host: PathName
    nic: PathName


class TrafficCreate(Strict):
    pattern: Literal["ring", "pairs", "alltoall"]
    ranks: list[Annotated[int, Field(ge=0, le=MAX_RANK)]] = Field(
        default_factory=list, description="ring: the ring's order; alltoall: members (all if empty)")
    pairs: list[tuple[Annotated[int, Field(ge=0, le=MAX_RANK)], Annotated[int, Field(ge=0, le=MAX_RANK)]]] = Field(
        default_factory=list, description="pairs: [src_rank, dst_rank] connections")
    channels: int = Field(1, ge=1, le=1024)
    qps_per_connection: int = Field(1, ge=1, le=1024)
    bytes_per_iteration: int | None = Field(None, ge=0)


class DiagnosisSettings(Strict):
    """The job's own C4D settings; each one left out keeps the controller's default."""

    hang_timeout_s: float | None = Field(None, gt=0, le=86_400, description="default C4_HANG_TIMEOUT_S")
    slow_factor: float | None = Field(None, gt=1, le=100, description="default C4_SLOW_FACTOR")
    slow_window: int | None = Field(None, ge=1, le=100, description="default C4_SLOW_WINDOW")
    auto_isolate: bool | None = Field(None, description="default C4_AUTO_ISOLATE")


class JobCreate(Strict):
    name: PathName
    ranks: list[RankCreate] = Field(min_length=1)
    traffic: list[TrafficCreate] = Field(min_length=1)
    diagnosis: DiagnosisSettings | None = None

    def to_spec(self) -> JobSpec:
        d = self.diagnosis
        return JobSpec(self.name, tuple(RankSpec(r.rank, r.host, r.nic) for r in self.ranks),
                       tuple(TrafficSpec(Pattern(t.pattern), tuple(t.ranks), tuple(t.pairs), t.channels,
                                         t.qps_per_connection, t.bytes_per_iteration) for t in self.traffic),
                       None if d is None else JobDiagnosis(d.hang_timeout_s, d.slow_factor, d.slow_window,
                                                           d.auto_isolate))


class ProbeResult(Strict):
    sport: int = Field(ge=0, le=65535)
    hops: list[str]


class ProbeReport(Strict):
    src_address: str
    dst_address: str
    protocol: Literal["udp", "tcp"] = "udp"
    dst_port: int = Field(4791, ge=1, le=65535)
    results: list[ProbeResult]
    t_us: int | None = None
