"""Request schemas of hosts, alarms, webhooks and job pauses."""

from __future__ import annotations

from pydantic import AnyHttpUrl, Field

from controller.api.schemas.common import Strict


class EmptyBody(Strict):
    """Actions that take no parameters accept an empty object (or no body) and nothing else."""


class IsolateRequest(Strict):
    reason: str = Field(min_length=1, max_length=2000)


class WebhookCreate(Strict):
    url: AnyHttpUrl
    events: list[str] = Field(min_length=1, max_length=32)
    secret: str = Field(min_length=8, max_length=512, description="HMAC-SHA256 key of X-C4-Signature")


class PauseCreate(Strict):
    """A pause the job expects (a checkpoint): no hang alarm for it until it ends."""

    duration_s: float = Field(gt=0, le=86_400, description="From now; at most a day")
    reason: str | None = Field(None, max_length=2000)
