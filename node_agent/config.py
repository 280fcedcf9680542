"""The node agent's settings: flags and ``C4_AGENT_*`` variables, validated at the edge.

One `AgentSettings` (pydantic-settings) holds everything the daemon, `check-config` and
`probe` need; unknown ``C4_AGENT_*`` names and bad values are errors naming the setting, so
a typo never silently falls back to a default. Flags given on the command line override the
environment. No I/O beyond reading the environment.

A typical host::

    C4_AGENT_CONTROLLER=https://c4.example:8000 C4_AGENT_TOKEN=... c4-node-agent
    c4-node-agent --controller http://127.0.0.1:8000 --host host3 --socket /run/c4/shim.sock \\
        --spool /var/lib/c4/spool check-config
"""

from __future__ import annotations

import os
import socket
from typing import Any

from pydantic import AnyHttpUrl, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from controller.domain.coll_packed import MAX_RECORDS  # the controller's records per batch

ENV_PREFIX = "C4_AGENT_"
DEFAULT_SHIM_PORT = 4792  # nccl_shim's C4_DEFAULT_SHIM_PORT: the host's fixed data port


class AgentSettings(BaseSettings):
    """Everything the agent reads; see node_agent/README.md for what each one does."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    controller: AnyHttpUrl = Field(description="The controller's base URL.")
    token: str = Field("", description="Bearer token with the agent role ('' for none).")
    host: str = Field(default_factory=socket.gethostname, min_length=1, max_length=200,
                      pattern=r"^[^\s/:]+$", description="This host's name in the topology.")
    socket: str = Field("/run/c4/shim.sock", min_length=1, max_length=107,
                        description="The Unix datagram socket the shim talks to.")
    socket_mode: int = Field(0o666, ge=0, le=0o777, description="File mode of that socket.")
    spool: str = Field("/var/lib/c4/spool", min_length=1,
                       description="Directory of the telemetry spool.")
    spool_max_mb: float = Field(256.0, gt=0, le=1_000_000, description="Spool size bound.")
    shim_port: int = Field(DEFAULT_SHIM_PORT, ge=0, le=65535,
                           description="The host's fixed data port the agent owns and hands "
                                       "sockets from (0: the agent does not listen).")
    listen: str = Field("127.0.0.1:9792", description="host:port of /healthz and /metrics "
                                                     "('' to serve neither).")
    batch_records: int = Field(2000, ge=1, le=MAX_RECORDS, description="Records per POST at most.")
    packed_batch_records: int = Field(
        5000, ge=1, le=MAX_RECORDS,
        description="Records per POST at most in the packed form. Either batch is cut shorter "
                    "where it would pass the controller's limits on peer entries (16,384), "
                    "flow entries (65,536) or body size (4 MiB) per batch.")
    batch_interval_s: float = Field(0.5, gt=0, le=60, description="Longest a record waits.")
    jobs_poll_s: float = Field(2.0, gt=0, le=600, description="How often the job list is read.")
    long_poll_s: float = Field(25.0, ge=0, le=60, description="Assignments long-poll wait.")
    http_timeout_s: float = Field(10.0, gt=0, le=600, description="Per request, beyond waits.")
    unmapped_grace_s: float = Field(2.0, ge=0, le=60,
                                    description="How long a record waits for its rank mapping.")
    heartbeat_s: float = Field(5.0, ge=0, le=600,
                               description="Empty batch when idle this long (0: never).")
    probe_interval_s: float = Field(30.0, ge=0, le=86400,
                                    description="Probe requests are fetched this often (0: off).")
    probe_ports: int = Field(64, ge=1, le=4096, description="Source ports probed per pair.")
    probe_base_port: int = Field(49152, ge=1024, le=65535, description="First source port.")
    probe_max_ttl: int = Field(8, ge=1, le=64, description="Hops probed at most.")
    probe_rate_pps: float = Field(2000.0, gt=0, le=1_000_000, description="Probe packet rate.")
    probe_timeout_s: float = Field(0.3, gt=0, le=30, description="Wait for each TTL's replies.")
    uvloop: bool = Field(True, description="Run on uvloop where installed (a fraction of "
                                           "asyncio's cost per wake-up; bench/agent).")
    log_level: str = Field("info", pattern=r"^(debug|info|warning|error)$")

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        if v and listen_address(v) is None:
            raise ValueError("want host:port (port 0..65535), or '' to serve nothing")
        return v

    @property
    def controller_url(self) -> str:
        return str(self.controller).rstrip("/")

    @property
    def spool_max_bytes(self) -> int:
        return int(self.spool_max_mb * 1024 * 1024)


def listen_address(v: str) -> tuple[str, int] | None:
    """("host", port) of a ``host:port`` string ("[::1]:9792" for IPv6), or None."""
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return host.strip("[]") or "0.0.0.0", int(port)


def unknown_env() -> list[str]:
    """``C4_AGENT_*`` variables that name no setting (typos), sorted."""
    known = {ENV_PREFIX + name.upper() for name in AgentSettings.model_fields}
    return sorted(k for k in os.environ if k.startswith(ENV_PREFIX) and k not in known)


def load(overrides: dict[str, Any] | None = None) -> AgentSettings:
    """Settings from the environment, with `overrides` (the flags given) on top.

    Raises `ConfigError` naming every bad or unknown setting.
    """
    typos = unknown_env()
    if typos:
        raise ConfigError([f"{k}: not a setting of c4-node-agent" for k in typos])
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        settings = AgentSettings(**given)
    except ValidationError as e:
        raise ConfigError([_describe(err) for err in e.errors()]) from None
    if settings.probe_base_port + settings.probe_ports - 1 > 65535:
        raise ConfigError(["probe_ports: base port + count runs past 65535"])
    return settings


def _describe(err: Any) -> str:
    field = ".".join(str(p) for p in err.get("loc", ())) or "(settings)"
    return f"{field} ({ENV_PREFIX}{field.upper()}): {err.get('msg', 'invalid')}"


class ConfigError(Exception):
    """Bad settings; `problems` names each one (flag/variable and what is wrong)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
