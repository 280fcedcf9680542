"""Request schemas of the jobs and probes endpoints; unknown keys are refused (422)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from controller.api.schemas.common import INT32_MAX, PathName, PathPortName, Strict
from controller.domain.jobs import JobDiagnosis, JobSpec, Pattern, RankSpec, TrafficSpec

MAX_RANK = INT32_MAX  # ranks are stored in 32-bit integer columns
MAX_RANKS = 65_536
MAX_JOB_FLOWS = 1 << 20  # connections x channels x qps_per_connection, over all traffic entries
ADDRESS_MAX = 64
MAX_PROBE_RESULTS = 4096
MAX_PROBE_HOPS = 64


class RankCreate(Strict):
    rank: int = Field(ge=0, le=MAX_RANK)
    host: PathName
    nic: PathPortName


class TrafficCreate(Strict):
    pattern: Literal["ring", "pairs", "alltoall"]
    ranks: list[Annotated[int, Field(ge=0, le=MAX_RANK)]] = Field(
        default_factory=list, max_length=MAX_RANKS,
        description="ring: the ring's order; alltoall: members (all if empty)")
    pairs: list[Annotated[list[Annotated[int, Field(ge=0, le=MAX_RANK)]], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, max_length=MAX_JOB_FLOWS, description="pairs: [src_rank, dst_rank] connections")
    channels: int = Field(1, ge=1, le=1024)
    qps_per_connection: int = Field(1, ge=1, le=1024)
    bytes_per_iteration: int | None = Field(None, ge=0, lt=2**63)

    def flows_at_most(self, job_ranks: int) -> int:
        """An upper bound on the flows this entry derives (API.md's connection rules)."""
        members = len(self.ranks) if self.ranks else job_ranks
        connections = {"ring": len(self.ranks), "pairs": len(self.pairs),
                       "alltoall": members * max(0, members - 1)}[self.pattern]
        return connections * self.channels * self.qps_per_connection


class DiagnosisSettings(Strict):
    """The job's own C4D settings; each one left out keeps the controller's default."""

    hang_timeout_s: float | None = Field(None, gt=0, le=86_400, description="default C4_HANG_TIMEOUT_S")
    slow_factor: float | None = Field(None, gt=1, le=100, description="default C4_SLOW_FACTOR")
    slow_window: int | None = Field(None, ge=1, le=100, description="default C4_SLOW_WINDOW")
    auto_isolate: bool | None = Field(None, description="default C4_AUTO_ISOLATE")


class JobCreate(Strict):
    name: PathName
    ranks: list[RankCreate] = Field(min_length=1, max_length=MAX_RANKS)
    traffic: list[TrafficCreate] = Field(min_length=1, max_length=64)
    diagnosis: DiagnosisSettings | None = None
    rebalance: bool = Field(True, description="False: the controller never shifts this job's load off congested "
                                              "links (weights or paths); its load still counts for other jobs.")

    @model_validator(mode="after")
    def _bounded(self) -> JobCreate:
        flows = sum(t.flows_at_most(len(self.ranks)) for t in self.traffic)
        if flows > MAX_JOB_FLOWS:
            raise ValueError(f"the traffic derives up to {flows} flows; at most {MAX_JOB_FLOWS} per job "
                             "(connections x channels x qps_per_connection)")
        return self

    def to_spec(self) -> JobSpec:
        d = self.diagnosis
        return JobSpec(self.name, tuple(RankSpec(r.rank, r.host, r.nic) for r in self.ranks),
                       tuple(TrafficSpec(Pattern(t.pattern), tuple(t.ranks), tuple((a, b) for a, b in t.pairs), t.channels,
                                         t.qps_per_connection, t.bytes_per_iteration) for t in self.traffic),
                       None if d is None else JobDiagnosis(d.hang_timeout_s, d.slow_factor, d.slow_window,
                                                           d.auto_isolate), self.rebalance)


class ProbeResult(Strict):
    sport: int = Field(ge=0, le=65535)
    hops: list[Annotated[str, Field(min_length=1, max_length=ADDRESS_MAX)]] = Field(max_length=MAX_PROBE_HOPS)


class ProbeReport(Strict):
    src_address: str = Field(min_length=1, max_length=ADDRESS_MAX)
    dst_address: str = Field(min_length=1, max_length=ADDRESS_MAX)
    protocol: Literal["udp", "tcp"] = "udp"
    dst_port: int = Field(4791, ge=1, le=65535)
    results: list[ProbeResult] = Field(max_length=MAX_PROBE_RESULTS)
    t_us: int | None = Field(None, ge=0, lt=2**62, description="When the probe ran; now when absent.")
