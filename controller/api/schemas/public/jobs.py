"""Response schemas of jobs: the job record with its plan summary, assignments, its links.

A planned two-rank job reads (`GET /v1/jobs/run7`)::

    {"name": "run7", "ranks": [{"rank": 0, "host": "host0", "nic": "mlx5_0"}, ...],
     "traffic": [{"pattern": "ring", "ranks": [0, 1], "pairs": [], "channels": 1,
                  "qps_per_connection": 2, "bytes_per_iteration": null}],
     "status": "planned", "version": 1,
     "plan": {"flows": 4, "max_link_utilization": 0.5, "lower_bound": 0.5,
              "ecmp_expected_max_utilization": 0.875, "solve_ms": 3, "solver": "...",
              "predicted_busbw_fraction": 1.0, "ecmp_predicted_busbw_fraction": 0.62, "moved_flows": 0},
     "created_at_us": 1764430000000000, "created_at": "2025-11-29T15:26:40.000000Z",
     "updated_at_us": 1764430000041000, "updated_at": "2025-11-29T15:26:40.041000Z"}
"""

from __future__ import annotations

from pydantic import Field

from controller.api.schemas.public.base import Public, instant
from controller.domain.fabric import LinkState
from controller.domain.jobs import JobStatus, Pattern


class RankPublic(Public):
    rank: int
    host: str
    nic: str


class TrafficPublic(Public):
    pattern: Pattern
    ranks: list[int] = Field(description="ring: the ring's order; alltoall: members (all if empty)")
    pairs: list[list[int]] = Field(description="pairs: [src_rank, dst_rank] connections")
    channels: int
    qps_per_connection: int
    bytes_per_iteration: int | None = None


class PlanPublic(Public):
    """The plan summary (API.md). Fields the planner adds later pass through."""

    flows: int = Field(description="Network flows of the job (flows within one host excluded).")
    max_link_utilization: float = Field(description="Max over the link directions carrying this job's flows.")
    lower_bound: float = Field(description="Proven lower bound on that max for any one-path-per-flow plan of "
                                           "this job, the other jobs' flows staying where they are.")
    ecmp_expected_max_utilization: float = Field(description="Mean max utilization of the same flows under "
                                                             "random source ports and NIC ports (ECMP, bonding).")
    solve_ms: int = Field(description="Planner time of the last full plan, ms.")
    solver: str
    predicted_busbw_fraction: float | None = Field(None, description="Predicted bus bandwidth / ideal under c4's plan.")
    ecmp_predicted_busbw_fraction: float | None = Field(
        None, description="The same under ECMP; null on a job planned in a batch with others, or moved by the joint "
                          "re-plan a new job may trigger, until its summary refresh fills it. Those refreshes come "
                          "first, the oldest null first; while jobs keep arriving they run only in short slices "
                          "(about 0.2 s every 2 s), so under churn the wait grows with the nulls planned before "
                          "it, with no fixed limit. `job.planned` carries the value as planned (null then); no "
                          "event carries it later: read the job.")
    moved_flows: int | None = Field(None, description="Flows whose path changed when the plan was last written (a "
                                                      "flow kept on its path under a new source port is not moved).")
    paths_known: float | None = Field(None, description="Share of the job's equal-cost paths with a known source "
                                                        "port: 1.0 in model mode; in probed mode, what probes have "
                                                        "covered (`lower_bound` is proven over every path).")
    congestion: list[dict[str, object]] | None = Field(
        None, description="The measured congestion the rebalancer answered by changing this plan, newest last (at "
                          "most 8): `link`, `direction`, `step` (weights, moves, restored), `at_us`, `since_us`, "
                          "`measured_gbps`, `utilization`, `planned_gbps`, `background_gbps`, "
                          "`ecn_marked_fraction`, `pfc_pauses_per_s`, `degraded`, `reason`.")


class JobPublic(Public):
    """A job: its spec as posted, status, assignment version and plan summary."""

    name: str
    ranks: list[RankPublic]
    traffic: list[TrafficPublic]
    status: JobStatus = Field(description="pending -> planned, or failed (with `error`).")
    version: int = Field(description="Increases whenever any assignment of the job changes.")
    plan: PlanPublic | None = None
    rebalance: bool | None = Field(None, description="False when the job opted out of rebalancing (absent: on).")
    progress: dict[str, object] | None = Field(None, description="While a pending job is being planned (after half "
                                                                 "a second): `phase`, `since_us`, `started_us`, "
                                                                 "`flows`.")
    error: str | None = Field(None, description="Why the job failed (only when `status` is failed).")
    flagged: bool | None = Field(None, description="True while the job uses an isolated host (only then present).")
    flag_reason: str | None = None
    created_at_us: int
    created_at: str | None = instant("created_at_us")
    updated_at_us: int
    updated_at: str | None = instant("updated_at_us")


class JobsPublic(Public):
    jobs: list[JobPublic]


class AssignmentPublic(Public):
    """One flow's assignment: the source port that pins it to `path` (API.md)."""

    src_rank: int
    dst_rank: int
    channel: int
    qp: int
    src_host: str
    src_nic: str
    src_port: str | None
    src_address: str | None
    dst_host: str
    dst_nic: str
    dst_port: str | None
    dst_address: str | None
    udp_sport: int | None
    weight: float | None = Field(description="Share of the connection's bytes (a connection's weights sum to 1).")
    path: list[str] | None = Field(description="Nodes the flow crosses.")
    links: list[str] | None = Field(description="Link names, in order.")


class AssignmentsPublic(Public):
    job: str
    version: int
    status: JobStatus
    assignments: list[AssignmentPublic]


class JobLinkPublic(Public):
    """A link direction the job's planned flows cross, with its own and the total planned load."""

    name: str
    direction: str = Field(description="`ab` (from `a` to `b`) or `ba`.")
    from_: str = Field(alias="from")
    to: str
    state: LinkState
    capacity_gbps: float
    host_link: bool
    job_gbps: float = Field(description="This job's planned demand on the direction.")
    job_flows: int
    planned_gbps: float = Field(description="Every job's planned demand on the direction.")
    flows: int
    planned_utilization: float


class JobLinksPublic(Public):
    job: str
    version: int | None = Field(None, description="The job's version (absent while it has no plan).")
    links: list[JobLinkPublic] = Field(description="Most utilized first.")
