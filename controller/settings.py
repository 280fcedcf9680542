"""Every setting of the controller, read once from `C4_*` environment variables.

This is the one place a default lives; the README's table is generated from it
(`c4 settings`). Pure packages never import this: services pass the values they need.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="C4_", extra="ignore")

    data_dir: Path = Field(Path(".c4"), description="Where the embedded SQLite database lives.")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL, e.g. postgresql+psycopg://c4@db/c4; unset: SQLite in the data dir."
    )
    admin_token: SecretStr | None = Field(None, description="If set, this value is a valid admin token.")
    log_level: str = Field("info", description="Log level of the controller.")
    db_connect_attempts: int = Field(30, description="Attempts to reach the database at start-up (1 s apart).")

    hang_timeout_s: float = Field(30.0, description="A collective in flight this long with no peer progress is a hang.")
    slow_factor: float = Field(3.0, description="A connection or rank this many times slower than its peers' median is slow.")
    slow_window: int = Field(10, description="Over this many collectives.")
    auto_isolate: bool = Field(True, description="Isolate the host an alarm names first and ask for a restart.")
    detector_interval_s: float = Field(1.0, description="How often the detectors run.")
    alarm_quiet_s: float = Field(60.0, description="An alarm whose evidence has been gone this long resolves itself.")
    telemetry_gap_s: float = Field(
        10.0, description="A host whose agent posted nothing (not even an empty batch) this long is in a telemetry gap.")

    plan_time_limit_s: float = Field(5.0, description="Time limit of one CP-SAT solve in the planner.")
    reoptimize_interval_s: float = Field(60.0, description="Period of the global re-optimisation.")
    move_budget: int = Field(256, description="Most flows a global re-optimisation may move.")
    probe_ttl_s: float = Field(600.0, description="Learned (src, dst, sport) -> path entries expire after this.")

    webhook_timeout_s: float = Field(5.0, description="Timeout of one webhook delivery attempt.")
    webhook_max_attempts: int = Field(12, description="Attempts before a delivery is given up.")
    webhook_backoff_s: float = Field(1.0, description="First retry delay; doubles per attempt, capped at 300 s.")

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'c4.db').resolve()}"
