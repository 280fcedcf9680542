"""Response schemas of diagnosis and administration: alarms, hosts, webhooks, tokens.

An alarm reads (`GET /v1/alarms/a-000017`)::

    {"id": "a-000017", "job": "gpt-22b-run7", "kind": "comm_slow", "state": "open",
     "comm": "0x7f3a9c01", "seq": 1042,
     "opened_at_us": 1764430012000000, "opened_at": "2025-11-29T15:26:52.000000Z",
     "acknowledged_at_us": null, "resolved_at_us": null, "resolved_by": null,
     "suspects": [{"kind": "link", "name": "leaf3:Ethernet1--spine1:Ethernet3"}],
     "evidence": {"summary": "connection 3->4 at 21% of its peers' median rate over 12 collectives"}}
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from controller.api.schemas.public.base import Public, instant
from controller.domain.alarms import AlarmKind, AlarmState, SuspectKind


class SuspectPublic(Public):
    kind: SuspectKind
    name: str = Field(description="A host, a `host:nic:port`, a link name or a rank number as a string.")


class AlarmPublic(Public):
    """One incident; suspects most likely first."""

    id: str = Field(examples=["a-000017"])
    job: str
    kind: AlarmKind
    state: AlarmState
    comm: str | None = None
    seq: int | None = None
    opened_at_us: int
    opened_at: str | None = instant("opened_at_us")
    acknowledged_at_us: int | None = None
    acknowledged_at: str | None = instant("acknowledged_at_us")
    resolved_at_us: int | None = None
    resolved_at: str | None = instant("resolved_at_us")
    resolved_by: str | None = Field(None, description="`detector` (evidence gone) or `operator`.")
    suspects: list[SuspectPublic]
    evidence: dict[str, Any] = Field(description="A human `summary` and the figures behind it.")


class AlarmsPublic(Public):
    alarms: list[AlarmPublic] = Field(description="Newest first.")


class HostPublic(Public):
    name: str
    state: str = Field(description="`active` or `isolated`.")
    reason: str | None = None
    alarm: str | None = Field(None, description="The alarm that isolated the host, if one did.")
    changed_at_us: int | None = None
    changed_at: str | None = instant("changed_at_us")


class PausePublic(Public):
    id: int
    job: str
    from_us: int = Field(description="When the pause starts (controller clock, µs since the epoch).")
    until_us: int = Field(description="When it ends; no hang alarm fires for the job in between.")
    reason: str | None = None
    active: bool = Field(description="Whether the pause is running now.")


class PausesPublic(Public):
    pauses: list[PausePublic]


class HostsPublic(Public):
    hosts: list[HostPublic] = Field(description="Sorted by name.")


class WebhookPublic(Public):
    """A subscription; its secret is never shown."""

    id: int
    url: str
    events: list[str]
    created_at_us: int
    created_at: str | None = instant("created_at_us")


class WebhooksPublic(Public):
    webhooks: list[WebhookPublic]


class DeliveryPublic(Public):
    id: int
    event: str
    attempts: int
    created_at_us: int
    created_at: str | None = instant("created_at_us")
    delivered_at_us: int | None = None
    delivered_at: str | None = instant("delivered_at_us")
    failed_at_us: int | None = Field(None, description="When the delivery was given up.")
    failed_at: str | None = instant("failed_at_us")
    next_attempt_at_us: int | None = None
    next_attempt_at: str | None = instant("next_attempt_at_us")
    last_error: str | None = None


class DeliveriesPublic(Public):
    deliveries: list[DeliveryPublic] = Field(description="The latest 100, newest first.")


class TokenPublic(Public):
    """An API token's record; its value is shown once at creation and never stored."""

    id: int
    name: str
    role: str
    created_at_us: int
    created_at: str | None = instant("created_at_us")
    revoked_at_us: int | None = None
    revoked_at: str | None = instant("revoked_at_us")


class TokensPublic(Public):
    tokens: list[TokenPublic]
