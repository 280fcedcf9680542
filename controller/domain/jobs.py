"""Value types of jobs: the spec a scheduler posts, the flows it implies, their assignments
and the plan summary shown on the job.

Frozen dataclasses (and the `FlowKey` named tuple) only: no I/O and no rules (deriving
flows and checking a spec against a fabric is `controller.te.flows`; planning is
`controller.te.planner`).

A two-rank ring on two single-NIC hosts, one channel and two QPs per connection, reads::

    JobSpec("run7", ranks=(RankSpec(0, "host0", "mlx5_0"), RankSpec(1, "host1", "mlx5_0")),
            traffic=(TrafficSpec("ring", ranks=(0, 1), channels=1, qps_per_connection=2),))

and gives four flows, (0, 1, 0, 0), (0, 1, 0, 1), (1, 0, 0, 0), (1, 0, 0, 1); the first one
planned on a two-spine fabric might be::

    Assignment(FlowKey(0, 1, 0, 0), src_node="host0:mlx5_0:p0", dst_node="host1:mlx5_0:p1",
               udp_sport=50021, weight=0.5,
               path=("host0:mlx5_0:p0", "leaf0", "spine1", "leaf3", "host1:mlx5_0:p1"),
               links=("host0:mlx5_0:p0--leaf0:Ethernet32", ...))
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class JobStatus(StrEnum):
    PENDING = "pending"
    PLANNED = "planned"
    FAILED = "failed"


class Pattern(StrEnum):
    RING = "ring"
    PAIRS = "pairs"
    ALLTOALL = "alltoall"


@dataclass(frozen=True, slots=True)
class RankSpec:
    rank: int
    host: str
    nic: str


@dataclass(frozen=True, slots=True)
class TrafficSpec:
    """One traffic pattern; `ranks` for ring/alltoall (alltoall: all ranks when empty)."""

    pattern: Pattern
    ranks: tuple[int, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()
    channels: int = 1
    qps_per_connection: int = 1
    bytes_per_iteration: int | None = None


@dataclass(frozen=True, slots=True)
class JobDiagnosis:
    """A job's own C4D settings (`diagnosis` in its spec); None keeps the controller's
    default (`C4_HANG_TIMEOUT_S`, `C4_SLOW_FACTOR`, `C4_SLOW_WINDOW`, `C4_AUTO_ISOLATE`)."""

    hang_timeout_s: float | None = None
    slow_factor: float | None = None
    slow_window: int | None = None
    auto_isolate: bool | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    ranks: tuple[RankSpec, ...]
    traffic: tuple[TrafficSpec, ...]
    diagnosis: JobDiagnosis | None = None
    # False: the rebalancer never changes this job's weights or paths (its load still counts).
    rebalance: bool = True


class FlowKey(NamedTuple):
    """A flow's identity inside its job (API.md: `(src_rank, dst_rank, channel, qp)`).

    A named tuple rather than a dataclass: it keys dicts of every flow of a job (16k and
    more per re-plan), and a tuple hashes and compares in C."""

    src_rank: int
    dst_rank: int
    channel: int
    qp: int


@dataclass(frozen=True, slots=True)
class Flow:
    """A network flow: source and destination NICs (`host`, `nic`) and its connection size."""

    key: FlowKey
    src_host: str
    src_nic: str
    dst_host: str
    dst_nic: str
    flows_in_connection: int

    @property
    def src(self) -> tuple[str, str]:
        return (self.src_host, self.src_nic)

    @property
    def dst(self) -> tuple[str, str]:
        return (self.dst_host, self.dst_nic)


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one flow goes: NIC ports (`host:nic:port` nodes), source port, path and weight."""

    key: FlowKey
    src_node: str
    dst_node: str
    udp_sport: int
    weight: float
    path: tuple[str, ...]
    links: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PlanSummary:
    """The `plan` object of a job (API.md), plus the simulator's bus-bandwidth predictions."""

    flows: int
    max_link_utilization: float
    lower_bound: float
    ecmp_expected_max_utilization: float
    solve_ms: int
    solver: str
    predicted_busbw_fraction: float
    # None while a summary made in a batch waits for its refresh (`te.config.Config.ecmp_simulation_later`)
    ecmp_predicted_busbw_fraction: float | None
    moved_flows: int = 0
    # The share of the job's equal-cost paths (over every up port pair of its NIC pairs) with
    # a known source port: 1.0 in model mode; in probed mode, the paths probes have covered.
    # `lower_bound` is always proven over every equal-cost path, known or not.
    paths_known: float = 1.0
