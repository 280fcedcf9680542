"""The switch agent's configuration file (TOML), validated strictly, and its secrets.

Unknown keys are refused and every error names its field path (`targets[3].profile`).
Secrets — v2c communities, v3 keys, the controller token — are never in the file itself: each
is read from a file (`*_file`) or an environment variable (`*_env`), held as `SecretStr` and
never logged or printed (`check-config` says where each comes from, not what it is).

A complete file::

    interval_s = 10
    concurrency = 32
    repoll_after_s = 0                 # > 0: re-poll a target whose port looks like lost capacity
    listen = "127.0.0.1:9464"          # /healthz and /metrics; "" turns them off

    [controller]
    url = "http://c4.example:8000"
    token_file = "/etc/c4/switch-agent.token"

    [snmp]                             # defaults for every target
    timeout_s = 1.0
    retries = 1
    v2c_decoder = "lean"               # or "pysnmp" (5x the CPU; README "How it polls")

    [credentials.fabric]
    version = "2c"
    community_env = "C4_SNMP_COMMUNITY"

    [credentials.secure]
    version = "3"
    user = "c4poll"
    auth_protocol = "sha256"
    auth_key_file = "/etc/c4/snmp-auth"
    priv_protocol = "aes128"
    priv_key_file = "/etc/c4/snmp-priv"

    [[targets]]
    switch = "leaf0"                   # the switch's name in the fabric
    address = "192.0.2.10"
    profile = "sonic"
    credentials = "fabric"
    pfc_priorities = [3]               # optional: only these priorities' PFC counters
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from switch_agents.profiles import PROFILES

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _one_source(model: BaseModel, stem: str, required: bool = True) -> None:
    file, env = getattr(model, f"{stem}_file"), getattr(model, f"{stem}_env")
    if file is not None and env is not None:
        raise ValueError(f"give {stem}_file or {stem}_env, not both")
    if required and file is None and env is None:
        raise ValueError(f"{stem}_file or {stem}_env is required")


class ControllerConfig(_Strict):
    url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$", description="Base URL of the controller API.")
    token_file: Path | None = None
    token_env: str | None = None
    timeout_s: float = Field(5.0, gt=0, le=120)
    spool_max_age_s: float = Field(120.0, ge=0, le=3600, description="Samples not posted within this are dropped.")
    spool_max_samples: int = Field(20_000, ge=1, le=1_000_000, description="Most switch samples held while the controller is away.")
    batch_max_samples: int = Field(500, ge=1, le=4096, description="Switch samples per POST.")

    @model_validator(mode="after")
    def _token(self) -> ControllerConfig:
        _one_source(self, "token")
        return self


class V2cCredentials(_Strict):
    version: Literal["2c"]
    community_file: Path | None = None
    community_env: str | None = None

    @model_validator(mode="after")
    def _community(self) -> V2cCredentials:
        _one_source(self, "community")
        return self


AuthProtocol = Literal["none", "md5", "sha", "sha224", "sha256", "sha384", "sha512"]
PrivProtocol = Literal["none", "des", "3des", "aes", "aes128", "aes192", "aes256"]


class V3Credentials(_Strict):
    version: Literal["3"]
    user: str = Field(min_length=1, max_length=32)
    auth_protocol: AuthProtocol = "sha"
    auth_key_file: Path | None = None
    auth_key_env: str | None = None
    priv_protocol: PrivProtocol = "aes"
    priv_key_file: Path | None = None
    priv_key_env: str | None = None
    context: str = Field("", max_length=64, description="SNMPv3 context name.")

    @model_validator(mode="after")
    def _keys(self) -> V3Credentials:
        _one_source(self, "auth_key", required=self.auth_protocol != "none")
        _one_source(self, "priv_key", required=self.priv_protocol != "none")
        if self.auth_protocol == "none" and self.priv_protocol != "none":
            raise ValueError("privacy needs authentication: set auth_protocol")
        return self


Credentials = Annotated[V2cCredentials | V3Credentials, Field(discriminator="version")]


class SnmpDefaults(_Strict):
    port: int = Field(161, ge=1, le=65535)
    timeout_s: float = Field(1.0, gt=0, le=60, description="Per SNMP request.")
    retries: int = Field(1, ge=0, le=10)
    max_repetitions: int = Field(25, ge=1, le=200)
    max_varbinds: int = Field(50, ge=1, le=200, description="Most variable bindings asked for in one request.")
    names_refresh_s: float = Field(300.0, gt=0, description="How often interface names are walked again.")
    v2c_decoder: Literal["lean", "pysnmp"] = Field(
        "lean", description="SNMPv2c responses: `lean` reads the varbinds' BER itself (a fifth of the CPU; "
                            "switch_agents/lean_v2c.py), `pysnmp` decodes them with pysnmp's full SMI spec.")


class TargetConfig(_Strict):
    switch: str = Field(pattern=NAME, description="The switch's name in the controller's fabric.")
    address: str = Field(min_length=1, max_length=255)
    profile: str
    credentials: str
    port: int | None = Field(None, ge=1, le=65535)
    timeout_s: float | None = Field(None, gt=0, le=60)
    retries: int | None = Field(None, ge=0, le=10)
    ports: list[str] | None = Field(None, description="Globs of interface names to report; default: the profile's.")
    exclude_ports: list[str] = Field(default_factory=list)
    port_names: dict[str, str] = Field(default_factory=dict, description="Interface name -> the fabric's port name.")
    pfc_priorities: list[Annotated[int, Field(ge=0, le=7)]] | None = Field(
        None, description="Only these priorities' PFC counters (fewer varbinds); default: all eight.")
    counters: list[str] | None = Field(
        None, description="Only these of the profile's counters (e.g. drop rx_pkts and discards to poll "
                          "fewer varbinds); default: all the profile has.")

    @model_validator(mode="after")
    def _profile(self) -> TargetConfig:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r} (known: {', '.join(sorted(PROFILES))})")
        known = {c.counter for c in PROFILES[self.profile].columns}
        for name in self.counters or []:
            if name not in known:
                raise ValueError(f"profile {self.profile!r} has no counter {name!r} (it has: {', '.join(sorted(known))})")
        return self


class AgentConfig(_Strict):
    interval_s: float = Field(10.0, ge=1, le=3600)
    concurrency: int = Field(32, ge=1, le=4096, description="Targets polled at once.")
    target_deadline_s: float | None = Field(
        None, gt=0, description="A target's whole poll must finish within this; default 0.8 x interval_s.")
    repoll_after_s: float = Field(
        0.0, ge=0, description="When a target's sample shows a port that may have lost capacity (its transmit "
                               "rate fell while it marks or pauses), poll that target again this long after the "
                               "cycle, and again this long after that while its re-poll still shows one (up to "
                               "repolls_per_interval times, each only if it leaves 0.2 s before the next cycle, "
                               "the first this long), so the controller can confirm it without waiting a whole "
                               "interval; 0: off; at least 0.2 s. Only for switches whose counters are read "
                               "fresh (the linux profile's extension: its cache, 0.15 s on the testbed, must be "
                               "shorter).")
    repolls_per_interval: int = Field(
        2, ge=1, le=8, description="With repoll_after_s: a target whose re-poll still shows such a port is polled "
                                   "again, up to this many times per interval (the controller confirms lost "
                                   "capacity on windows spanning C4_CONGESTION_FAST_CONFIRM_SPAN_S, 0.7 s: two "
                                   "re-polls 0.35 s apart).")
    listen: str = Field("127.0.0.1:9464", pattern=r"^$|^[^\s]+:\d{1,5}$")
    controller: ControllerConfig | None = None
    snmp: SnmpDefaults = Field(default_factory=SnmpDefaults)
    credentials: dict[str, Credentials] = Field(default_factory=dict)
    targets: list[TargetConfig] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _references(self) -> AgentConfig:
        seen: dict[str, int] = {}
        for i, t in enumerate(self.targets):
            if t.credentials not in self.credentials:
                raise ValueError(f"targets[{i}].credentials: no credentials named {t.credentials!r}")
            if t.switch in seen:
                raise ValueError(f"targets[{i}].switch: {t.switch!r} is already targets[{seen[t.switch]}]")
            seen[t.switch] = i
        return self

    @model_validator(mode="after")
    def _repoll(self) -> AgentConfig:
        if 0 < self.repoll_after_s < 0.2:  # the controller confirms on windows of 0.2 s or more
            raise ValueError(f"repoll_after_s: {self.repoll_after_s:g} s is shorter than the 0.2 s window the "
                             "controller confirms lost capacity on (C4_CONGESTION_FAST_CONFIRM_MIN_S); 0: off")
        if self.repoll_after_s and self.repoll_after_s * 2 > self.interval_s:
            raise ValueError(f"repoll_after_s: {self.repoll_after_s:g} s leaves no room inside the "
                             f"{self.interval_s:g} s interval (at most half of it)")
        return self

    @property
    def deadline_s(self) -> float:
        return self.target_deadline_s or 0.8 * self.interval_s


class ConfigError(Exception):
    """Configuration problems, each `(field path, message)`."""

    def __init__(self, problems: tuple[tuple[str, str], ...]) -> None:
        super().__init__(problems)
        self.problems = problems

    def __str__(self) -> str:
        return "\n".join(f"{field}: {message}" for field, message in self.problems)


_NAMED = re.compile(r"^([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+)*): ")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("V2cCredentials", "V3Credentials") or str(part) in ("2c", "3"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(file)"


def parse(text: str) -> AgentConfig:
    """Parse and validate a configuration text; raises ConfigError naming every bad field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError((("(file)", f"not valid TOML: {exc}"),)) from None
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            loc = _path(tuple(err["loc"]))
            named = _NAMED.match(msg)  # a cross-field check names its field first
            if named and (msg.startswith("targets[") or loc == "(file)"):
                loc, msg = named.group(1), msg[named.end():]
            problems.append((loc, msg))
        raise ConfigError(tuple(problems)) from None


def load(path: Path) -> AgentConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(((str(path), f"cannot read: {exc.strerror}"),)) from None
    return parse(text)


@dataclass(frozen=True, slots=True)
class Secrets:
    """Secret values resolved from files and the environment, by credentials name."""

    token: SecretStr | None
    community: Mapping[str, SecretStr]
    auth_key: Mapping[str, SecretStr]
    priv_key: Mapping[str, SecretStr]


def _read(field: str, file: Path | None, env: str | None, environ: Mapping[str, str]) -> SecretStr:
    if file is not None:
        try:
            value = file.read_text().strip()
        except OSError as exc:
            raise ConfigError(((f"{field}_file", f"cannot read {file}: {exc.strerror}"),)) from None
        if not value:
            raise ConfigError(((f"{field}_file", f"{file} is empty"),))
        return SecretStr(value)
    assert env is not None
    value = environ.get(env, "")
    if not value:
        raise ConfigError(((f"{field}_env", f"environment variable {env} is not set or empty"),))
    return SecretStr(value)


def resolve_secrets(cfg: AgentConfig, environ: Mapping[str, str] | None = None) -> Secrets:
    """Read every secret the configuration names; raises ConfigError naming all missing ones."""
    env = os.environ if environ is None else environ
    problems: list[tuple[str, str]] = []
    token = None
    community: dict[str, SecretStr] = {}
    auth: dict[str, SecretStr] = {}
    priv: dict[str, SecretStr] = {}

    def attempt(field: str, file: Path | None, env_name: str | None) -> SecretStr | None:
        try:
            return _read(field, file, env_name, env)
        except ConfigError as exc:
            problems.extend(exc.problems)
            return None

    if cfg.controller is not None:
        token = attempt("controller.token", cfg.controller.token_file, cfg.controller.token_env)
    for name, cred in sorted(cfg.credentials.items()):
        where = f"credentials.{name}"
        if isinstance(cred, V2cCredentials):
            got = attempt(f"{where}.community", cred.community_file, cred.community_env)
            if got is not None:
                community[name] = got
            continue
        if cred.auth_protocol != "none":
            got = attempt(f"{where}.auth_key", cred.auth_key_file, cred.auth_key_env)
            if got is not None:
                auth[name] = got
        if cred.priv_protocol != "none":
            got = attempt(f"{where}.priv_key", cred.priv_key_file, cred.priv_key_env)
            if got is not None:
                priv[name] = got
    if problems:
        raise ConfigError(tuple(problems))
    return Secrets(token, community, auth, priv)


def describe(cfg: AgentConfig) -> list[str]:
    """What `check-config` prints: a summary with no secret in it."""
    lines = [f"interval {cfg.interval_s:g} s, {len(cfg.targets)} targets, concurrency {cfg.concurrency}, "
             f"per-target deadline {cfg.deadline_s:g} s, health and metrics on {cfg.listen or '(off)'}"]
    if cfg.controller is None:
        lines.append("controller: none (samples only with --output)")
    else:
        src = f"file {cfg.controller.token_file}" if cfg.controller.token_file else f"${cfg.controller.token_env}"
        lines.append(f"controller: {cfg.controller.url} (token from {src}; spool {cfg.controller.spool_max_age_s:g} s, "
                     f"{cfg.controller.spool_max_samples} samples)")
    for name, cred in sorted(cfg.credentials.items()):
        if isinstance(cred, V2cCredentials):
            src = f"file {cred.community_file}" if cred.community_file else f"${cred.community_env}"
            lines.append(f"credentials {name}: SNMPv2c, community from {src}")
        else:
            lines.append(f"credentials {name}: SNMPv3 user {cred.user}, auth {cred.auth_protocol}, "
                         f"privacy {cred.priv_protocol}")
    by_profile: dict[str, int] = {}
    for t in cfg.targets:
        by_profile[t.profile] = by_profile.get(t.profile, 0) + 1
    lines.append("targets by profile: " + ", ".join(f"{p} {n}" for p, n in sorted(by_profile.items())))
    return lines
