"""Every setting of the controller, read once from `C4_*` environment variables.

This is the one place a default lives; the README's table is generated from it
(`c4 settings`). Pure packages never import this: services pass the values they need.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The most C4_CONGESTION_FAST_CONFIRM_MIN_S and _SPAN_S may be. Longer, a lost-capacity
# confirmation comes no sooner than the smoothed rule enters (two samples: 20 s at the switch
# agent's default 10 s polls), which is the fast rule's whole point; and milliseconds typed for
# seconds (700) are refused, not waited for.
MAX_CONFIRM_S = 60.0


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="C4_", extra="ignore")

    data_dir: Path = Field(Path(".c4"), description="Where the embedded SQLite database lives.")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL, e.g. postgresql+psycopg://c4@db/c4; unset: SQLite in the data dir."
    )
    admin_token: SecretStr | None = Field(None, description="If set, this value is a valid admin token.")
    log_level: str = Field("info", description="Log level of the controller.")
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as text (key=value) or as one JSON object per line.")
    max_body_bytes: int = Field(
        64 << 20, ge=1024, description="Largest request body any route accepts (PUT /v1/topology's); "
                                       "each route has its own lower limit (docs/SECURITY.md); larger is a 413.")
    max_fabric_links: int = Field(
        262_144, ge=1, description="Most links a fabric may have, host ports included (PUT and generate; 422).")
    max_fabric_switches: int = Field(16_384, ge=1, description="Most switches a fabric may have (422).")
    shutdown_drain_s: float = Field(
        10.0, ge=0, description="On SIGTERM, how long requests in progress may finish; then they are cancelled.")
    webhook_allow_networks: str = Field(
        "", description="Comma-separated networks (CIDR) webhooks may reach although private, loopback or "
                        "link-local, e.g. 10.0.0.0/8; cloud metadata addresses are never reachable.")
    link_metrics_max_series: int = Field(
        2000, description="Most link directions in /metrics' per-link gauges, planned and measured each "
                          "(most utilized first; measured: congested first).")
    gc_maintenance_s: float = Field(
        3600.0, ge=0, description="Every this many seconds one full garbage collection of what heavy work left "
                                  "frozen (services.collector; c4_gc_maintenance_seconds); 0: never.")
    db_connect_attempts: int = Field(30, description="Attempts to reach the database at start-up (1 s apart).")

    hang_timeout_s: float = Field(30.0, description="A collective in flight this long with no peer progress is a hang.")
    slow_factor: float = Field(3.0, description="A connection or rank this many times slower than its peers' median is slow.")
    slow_window: int = Field(10, description="Over this many collectives.")
    auto_isolate: bool = Field(True, description="Isolate the host an alarm names first and ask for a restart.")
    detector_interval_s: float = Field(1.0, description="How often the detectors run.")
    link_report_hold_s: float = Field(
        2.0, ge=0, description="Where switch agents report their ports' ifOperStatus, a communication hang that "
                               "names no link reported down waits this long past the hang timeout for a late report.")
    alarm_quiet_s: float = Field(60.0, description="An alarm whose evidence has been gone this long resolves itself.")
    telemetry_gap_s: float = Field(
        10.0, description="A host whose agent posted nothing (not even an empty batch) this long is in a telemetry gap.")
    telemetry_shards: int = Field(
        64, ge=0, le=4096,
        description="On PostgreSQL: jobs' telemetry is split into this many shards, each owned by one replica "
                    "(every replica accepts telemetry); 0 keeps the leader-only path. SQLite always uses one process.")
    telemetry_replay_s: float = Field(
        30.0, ge=0, description="On PostgreSQL: accepted telemetry is kept this long, and a replica taking over a "
                                "shard replays it into its detectors.")

    plan_time_limit_s: float = Field(5.0, description="Deadline of one plan: every flow placed and a bound proven first, improvements until it.")
    plan_processes: int | None = Field(
        None, ge=0, le=64,
        description="Processes that plan independent fabric parts of a batch of new jobs at once (pods whose jobs "
                    "share no switch); 0 or 1: none, the planner thread plans every part; unset: the CPU count "
                    "less one, at most 8.")
    reoptimize_interval_s: float = Field(60.0, description="Period of the global re-optimisation.")
    move_budget: int = Field(256, description="Most flows a global re-optimisation may move.")
    probe_ttl_s: float = Field(600.0, description="Learned (src, dst, sport) -> path entries expire after this.")

    webhook_timeout_s: float = Field(5.0, description="Timeout of one webhook delivery attempt.")
    webhook_max_attempts: int = Field(12, description="Attempts before a delivery is given up.")
    webhook_backoff_s: float = Field(1.0, description="First retry delay; doubles per attempt, capped at 300 s.")

    link_series_retention_s: float = Field(
        1800.0, description="Measured link-direction samples (switch telemetry) are kept this long.")
    link_sample_fresh_s: float = Field(
        30.0, description="A link direction's measurement is shown while its latest sample is this recent.")
    congestion_ewma_tau_s: float = Field(15.0, description="Time constant of the congestion detector's EWMA.")
    congestion_ecn_enter_fraction: float = Field(0.05, description="Smoothed ECN-marked fraction that enters congestion.")
    congestion_ecn_leave_fraction: float = Field(0.01, description="Smoothed ECN-marked fraction at or below which it is calm.")
    congestion_min_pkts_per_s: float = Field(1000.0, description="ECN fractions of directions slower than this are ignored.")
    congestion_pfc_enter_per_s: float = Field(100.0, description="Smoothed PFC pause frames/s (any priority) that enter congestion.")
    congestion_pfc_leave_per_s: float = Field(10.0, description="Smoothed PFC pause frames/s at or below which it is calm.")
    congestion_enter_samples: int = Field(2, description="Hot samples in a row that enter congestion.")
    congestion_leave_samples: int = Field(5, description="Calm samples in a row that leave congestion.")
    congestion_min_congested_s: float = Field(60.0, description="A congested direction stays so at least this long.")
    congestion_stale_s: float = Field(60.0, description="A congested direction with no sample this long leaves congestion.")
    congestion_hold_down_s: float = Field(300.0, description="A flow moved off a congested link is not moved again for this long.")
    congestion_fast_enter_fraction: float = Field(0.5, ge=0, le=1, description="A sample at an enter threshold carrying under this share of the link's capacity, its rate falling (or slow and not rising), starts a lost-capacity check; the windows after it confirm it and enter (0: off).")
    congestion_fast_enter_fall: float = Field(0.1, ge=0, lt=1, description="How far under the smoothed rate that sample's rate must be.")
    congestion_fast_confirm_min_s: float = Field(0.2, description="The shortest window after a lost-capacity sample that counts towards confirming (or cancelling) it; shorter ones only add to its sums. 0 to 60.")
    congestion_fast_confirm_span_s: float = Field(0.7, description="How long the windows after a lost-capacity sample must span to confirm it (twice the longest single sender pause they rule out). 0 to 60.")
    rebalance_enabled: bool = Field(True, description="Rebalance load off congested links (off: detect and show only).")
    rebalance_interval_s: float = Field(2.0, gt=0, description="Period of the rebalancer's round (it also runs when congestion enters).")
    rebalance_weight_cut: float = Field(0.5, ge=0, le=1, description="Share of a congested flow's weight moved to its siblings.")
    rebalance_target_utilization: float = Field(0.9, gt=0, le=1, description="Moves stop when a congested direction's load is at most this share of what it carried.")
    rebalance_headroom: float = Field(1.0, gt=0, description="Flows move only onto routes no link direction of which goes above this utilization.")
    rebalance_degraded_fraction: float = Field(0.5, ge=0, le=1, description="Congested below this share of capacity: degraded, drained like a drained link.")

    @field_validator("congestion_fast_confirm_min_s", "congestion_fast_confirm_span_s")
    @classmethod
    def _confirm_seconds(cls, value: float, info: ValidationInfo) -> float:
        if not math.isfinite(value) or not 0 <= value <= MAX_CONFIRM_S:
            raise ValueError(f"C4_{(info.field_name or '').upper()}: {value!r} is not a number of seconds from 0 "
                             f"to {MAX_CONFIRM_S:g}")
        return value

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'c4.db').resolve()}"
