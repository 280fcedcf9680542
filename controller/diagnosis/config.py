"""Thresholds and bounds of C4D, as one value passed in by the caller.

The defaults match API.md (`C4_HANG_TIMEOUT_S`, `C4_SLOW_FACTOR`, `C4_SLOW_WINDOW`); the
settings layer reads the environment and builds this value. Nothing here reads the environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from controller.domain.jobs import JobDiagnosis


@dataclass(frozen=True, slots=True)
class DiagnosisConfig:
    # A collective in flight this long on some rank with no progress is a hang.
    hang_timeout_s: float = 30.0
    # A connection (rate) or rank (compute gap) this many times slower than its peers' median...
    slow_factor: float = 3.0
    # ...in most of this many recent completed collectives, is slow.
    slow_window: int = 10
    # Collectives kept per communicator (bounds memory); must exceed slow_window.
    window_collectives: int = 32
    # Communicators kept per job; the least recently updated are dropped beyond this.
    max_comms_per_job: int = 64
    # A communicator with no record for this long is forgotten (job ended or restarted).
    comm_idle_expiry_s: float = 600.0
    # An alarm whose evidence has been gone this long resolves itself.
    quiet_window_s: float = 60.0
    # Connections moving fewer bytes are latency-bound; their rates say nothing.
    min_conn_bytes: int = 1 << 20
    # A rank must hold its peers back by at least this much to be late at all.
    min_late_us: int = 2_000
    # A host whose agent sent nothing (not even an empty batch) this long is in a telemetry
    # gap: its ranks are unknown, never hang suspects by themselves.
    telemetry_gap_s: float = 10.0
    # A send still on the network this share of the hang timeout after its connection's last
    # completion is stuck there (RDMA or socket alike; needs `net_us`).
    pending_share: float = 0.5
    # A flow completing this long after a stuck flow's last progress shows its path works.
    after_stall_us: int = 10_000
    # A comm_slow finding whose first suspect other elements explain exactly as well (one slow
    # connection: its ports, hosts and links) waits this long for evidence that tells them
    # apart, such as another job slowed by the same link, before it opens an alarm.
    ambiguity_hold_s: float = 2.0
    # Where switches report their ports' operational state, a comm_hang finding that names no
    # link reported down waits this long past the hang timeout for their report: a switch's
    # SNMP agent caches its interface table for seconds (net-snmp's snmpd, measured on the
    # testbed: the down state reached the controller 1.5-5 s after the port went down), and a
    # hang found first would name a guess (an endpoint, which isolates a healthy host).
    link_report_hold_s: float = 2.0

    def __post_init__(self) -> None:
        if self.window_collectives <= self.slow_window:
            raise ValueError("window_collectives must exceed slow_window")
        if self.slow_factor <= 1.0 or self.slow_window < 1 or self.hang_timeout_s <= 0:
            raise ValueError("slow_factor > 1, slow_window >= 1 and hang_timeout_s > 0")

    def for_job(self, overrides: JobDiagnosis | None) -> DiagnosisConfig:
        """This configuration with a job's own settings (from its spec) applied."""
        if overrides is None:
            return self
        out = self
        if overrides.hang_timeout_s is not None:
            out = replace(out, hang_timeout_s=float(overrides.hang_timeout_s))
        if overrides.slow_factor is not None:
            out = replace(out, slow_factor=float(overrides.slow_factor))
        if overrides.slow_window is not None:
            window = max(self.window_collectives, 3 * overrides.slow_window)
            out = replace(out, slow_window=int(overrides.slow_window), window_collectives=window)
        return out

    @property
    def hang_timeout_us(self) -> int:
        return int(self.hang_timeout_s * 1_000_000)

    @property
    def telemetry_gap_us(self) -> int:
        return int(self.telemetry_gap_s * 1_000_000)

    @property
    def pending_us(self) -> int:
        return int(self.hang_timeout_us * self.pending_share)

    @property
    def quiet_window_us(self) -> int:
        return int(self.quiet_window_s * 1_000_000)

    @property
    def comm_idle_expiry_us(self) -> int:
        return int(self.comm_idle_expiry_s * 1_000_000)

    @property
    def persistence(self) -> int:
        """Collectives out of `slow_window` that must agree: a strict majority."""
        return self.slow_window // 2 + 1

    @property
    def healthy_ratio(self) -> float:
        """At or above this share of the peers' median a connection counts as healthy and
        exonerates what it crosses; between this and 1/slow_factor it says nothing."""
        return 1.0 / math.sqrt(self.slow_factor)
