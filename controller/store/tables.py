"""SQLAlchemy 2 typed tables. Alembic migrations in `migrations/` must match these.

Fabric tables are replaced whole by `PUT /v1/topology`; host states, jobs, alarms, tokens
and webhooks are keyed by names and survive a fabric replacement.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class FabricRow(Base):
    """The one current fabric's header (id is always 1); `revision` bumps on every change."""

    __tablename__ = "fabric"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    hashing_mode: Mapped[str] = mapped_column(String(16))
    hashing_model: Mapped[str] = mapped_column(String(64))
    hashing_protocol: Mapped[str] = mapped_column(String(8))
    hashing_dst_port: Mapped[int] = mapped_column(Integer)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    updated_at_us: Mapped[int] = mapped_column(BigInteger)


class SwitchRow(Base):
    __tablename__ = "switches"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    pod: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ecmp_seed: Mapped[int] = mapped_column(BigInteger, default=0)
    mgmt_address: Mapped[str | None] = mapped_column(String(64), nullable=True)


class LinkRow(Base):
    """Switch-to-switch links and host-port links (`is_host_link`), with their live state."""

    __tablename__ = "links"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(400), unique=True)
    a: Mapped[str] = mapped_column(String(300))
    a_port: Mapped[str] = mapped_column(String(100))
    a_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    b: Mapped[str] = mapped_column(String(200))
    b_port: Mapped[str] = mapped_column(String(100))
    b_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    capacity_gbps: Mapped[float] = mapped_column(Float)
    is_host_link: Mapped[bool] = mapped_column(Boolean, default=False)
    state: Mapped[str] = mapped_column(String(16), default="up")
    state_changed_at_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class HostRow(Base):
    __tablename__ = "hosts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200), unique=True)


class NicRow(Base):
    __tablename__ = "nics"
    __table_args__ = (UniqueConstraint("host_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(100))
    rail: Mapped[int] = mapped_column(Integer, default=0)


class HostPortRow(Base):
    __tablename__ = "host_ports"
    __table_args__ = (UniqueConstraint("nic_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    nic_id: Mapped[int] = mapped_column(ForeignKey("nics.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(100))
    address: Mapped[str] = mapped_column(String(64), unique=True)
    switch: Mapped[str] = mapped_column(String(200))
    switch_port: Mapped[str] = mapped_column(String(100))
    capacity_gbps: Mapped[float] = mapped_column(Float)
    link_name: Mapped[str] = mapped_column(String(400))


class HostStateRow(Base):
    """Whether a host may be used; survives fabric replacement."""

    __tablename__ = "host_states"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), default="active")
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    alarm_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    changed_at_us: Mapped[int] = mapped_column(BigInteger)


class JobRow(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The planner's phase while the job is pending (`{"phase", "since_us", ...}`); null once planned.
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    flagged: Mapped[bool] = mapped_column(Boolean, default=False)
    flag_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at_us: Mapped[int] = mapped_column(BigInteger)
    updated_at_us: Mapped[int] = mapped_column(BigInteger)
    # The bound epoch (`BoundEpochRow`) the plan's `lower_bound` was proven at (null: its start).
    bound_log_scale: Mapped[float | None] = mapped_column(Float, nullable=True)
    bound_drops: Mapped[int | None] = mapped_column(Integer, nullable=True)


class BoundEpochRow(Base):
    """The fabric-wide bound epoch (id is always 1; absent until the first job POST or DELETE):
    `log_scale`, the sum of ln(demand factor) of every job posted (each lowers the demands
    of the NICs it shares); `drops`, how many planned jobs left (their flows left others'
    background). A stored bound proven at epoch (l, d) reads as its multiple exp(log_scale - l)
    while `drops` is still d (`te.carry.shown_bound`)."""

    __tablename__ = "bound_epoch"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    log_scale: Mapped[float] = mapped_column(Float)
    drops: Mapped[int] = mapped_column(Integer)


class NicFlowsRow(Base):
    """Flows per source NIC over every active (pending or planned) job: API.md's demand count,
    kept by the transactions that change the active jobs (exists with `BoundEpochRow`)."""

    __tablename__ = "nic_flows"
    host: Mapped[str] = mapped_column(String(200), primary_key=True)
    nic: Mapped[str] = mapped_column(String(100), primary_key=True)
    flows: Mapped[int] = mapped_column(Integer)


class FlowRow(Base):
    """One network flow of a job and, once planned, its assignment (API.md's fields)."""

    __tablename__ = "flows"
    __table_args__ = (
        UniqueConstraint("job_id", "src_rank", "dst_rank", "channel", "qp"),
        Index("ix_flows_job_src_host", "job_id", "src_host"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    src_rank: Mapped[int] = mapped_column(Integer)
    dst_rank: Mapped[int] = mapped_column(Integer)
    channel: Mapped[int] = mapped_column(Integer)
    qp: Mapped[int] = mapped_column(Integer)
    src_host: Mapped[str] = mapped_column(String(200))
    src_nic: Mapped[str] = mapped_column(String(100))
    dst_host: Mapped[str] = mapped_column(String(200))
    dst_nic: Mapped[str] = mapped_column(String(100))
    src_port: Mapped[str | None] = mapped_column(String(100), nullable=True)
    src_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    dst_port: Mapped[str | None] = mapped_column(String(100), nullable=True)
    dst_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    udp_sport: Mapped[int | None] = mapped_column(Integer, nullable=True)
    weight: Mapped[float | None] = mapped_column(Float, nullable=True)
    path: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    links: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)


class ProbeRow(Base):
    """A learned (src, dst, protocol, dst_port, sport) -> hops entry from a node agent's probe."""

    __tablename__ = "probes"
    __table_args__ = (UniqueConstraint("src_address", "dst_address", "protocol", "dst_port", "sport"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    src_address: Mapped[str] = mapped_column(String(64))
    dst_address: Mapped[str] = mapped_column(String(64))
    protocol: Mapped[str] = mapped_column(String(8))
    dst_port: Mapped[int] = mapped_column(Integer)
    sport: Mapped[int] = mapped_column(Integer)
    hops: Mapped[list[Any]] = mapped_column(JSON)
    path: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    t_us: Mapped[int] = mapped_column(BigInteger, index=True)


class AlarmRow(Base):
    """An incident found by a detector. The public id is `a-` + the zero-padded row id."""

    __tablename__ = "alarms"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    state: Mapped[str] = mapped_column(String(16), default="open", index=True)
    comm: Mapped[str | None] = mapped_column(String(64), nullable=True)
    seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    incident_key: Mapped[str] = mapped_column(String(400), index=True)
    # The incident without its opening time (job/kind/first suspect): at most one alarm that is
    # not resolved per incident, whichever detector process opened it (telemetry handover).
    incident: Mapped[str] = mapped_column(String(400))
    suspects: Mapped[list[Any]] = mapped_column(JSON)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
    opened_at_us: Mapped[int] = mapped_column(BigInteger)
    acknowledged_at_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    resolved_at_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    resolved_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    __table_args__ = (Index("ux_alarms_open_incident", "incident", unique=True,
                            postgresql_where=text("state <> 'resolved'"),
                            sqlite_where=text("state <> 'resolved'")),)


class ApiTokenRow(Base):
    """A bearer token, stored as the SHA-256 of its value (the value is shown once)."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at_us: Mapped[int] = mapped_column(BigInteger)
    revoked_at_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class WebhookRow(Base):
    __tablename__ = "webhooks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[Any]] = mapped_column(JSON)
    secret: Mapped[str] = mapped_column(Text)
    created_at_us: Mapped[int] = mapped_column(BigInteger)


class OutboxRow(Base):
    """A webhook delivery waiting or done; persisted so a restart loses none."""

    __tablename__ = "webhook_outbox"
    __table_args__ = (Index("ix_outbox_pending", "delivered_at_us", "next_attempt_at_us"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at_us: Mapped[int] = mapped_column(BigInteger)
    delivered_at_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    failed_at_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at_us: Mapped[int] = mapped_column(BigInteger)


class SwitchPortCountersRow(Base):
    """The latest raw counters of one switch port and the rates of its last interval: any
    process may ingest the next poll, and a rate needs the previous one."""

    __tablename__ = "switch_port_counters"
    switch: Mapped[str] = mapped_column(String(200), primary_key=True)
    port: Mapped[str] = mapped_column(String(200), primary_key=True)
    t_us: Mapped[int] = mapped_column(BigInteger)
    epoch: Mapped[str | None] = mapped_column(String(64), nullable=True)
    counters: Mapped[dict[str, Any]] = mapped_column(JSON)
    rates: Mapped[dict[str, Any]] = mapped_column(JSON)
    interval_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # IF-MIB ifOperStatus of the latest sample that carried one ("up", "down", ...); null: never reported
    oper_status: Mapped[str | None] = mapped_column(String(32), nullable=True)


class LinkSampleRow(Base):
    """One poll interval of one link direction: the measured rates (`raw`) and the congestion
    detector's smoothed view after it (`smoothed`, `congested`). Pruned after the retention."""

    __tablename__ = "link_samples"
    __table_args__ = (Index("ix_link_samples_series", "link", "direction", "t_us"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    link: Mapped[str] = mapped_column(String(400))
    direction: Mapped[str] = mapped_column(String(2))
    t_us: Mapped[int] = mapped_column(BigInteger, index=True)
    interval_us: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(String(420))
    side: Mapped[str] = mapped_column(String(2))
    raw: Mapped[dict[str, Any]] = mapped_column(JSON)
    smoothed: Mapped[dict[str, Any]] = mapped_column(JSON)
    congested: Mapped[bool] = mapped_column(Boolean)


class LinkDirectionStateRow(Base):
    """The congestion detector's state of one link direction after its latest sample."""

    __tablename__ = "link_direction_states"
    link: Mapped[str] = mapped_column(String(400), primary_key=True)
    direction: Mapped[str] = mapped_column(String(2), primary_key=True)
    t_us: Mapped[int] = mapped_column(BigInteger)
    congested: Mapped[bool] = mapped_column(Boolean)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)


class JobPauseRow(Base):
    """A pause a job announced (a checkpoint): no hang alarm for it during [from, until)."""

    __tablename__ = "job_pauses"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(200), index=True)
    from_us: Mapped[int] = mapped_column(BigInteger)
    until_us: Mapped[int] = mapped_column(BigInteger, index=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at_us: Mapped[int] = mapped_column(BigInteger)


class HostTelemetryRow(Base):
    """A host's node agent as the detectors last saw it: `state` is `reporting` or `gap`
    (silent for the telemetry-gap time). Written by the leader on changes and every few
    seconds; read by any process for /v1/hosts and /metrics."""

    __tablename__ = "host_telemetry"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    last_heard_us: Mapped[int] = mapped_column(BigInteger)
    gap_since_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    changed_at_us: Mapped[int] = mapped_column(BigInteger)


class TelemetryInboxRow(Base):
    """Telemetry accepted by any replica, waiting for (and kept a while after) the replica that
    owns its shard (PostgreSQL only; services.telemetry_shards). One row per part of a posted
    batch that falls in one shard; `body` is the records in the compact form of
    services.telemetry_codec. Rows are immutable; the owners prune them after the replay time."""

    __tablename__ = "telemetry_inbox"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer)
    arrival_us: Mapped[int] = mapped_column(BigInteger)
    host: Mapped[str] = mapped_column(String(200))
    records: Mapped[int] = mapped_column(Integer)
    body: Mapped[str] = mapped_column(Text)
    __table_args__ = (Index("ix_telemetry_inbox_shard_arrival", "shard", "arrival_us"),)
