"""Response schemas of measured link load: `GET /v1/links/{name}/series` and `GET /v1/congestion`
(the `measured` object of `GET /v1/links` is `MeasuredPublic` too)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from controller.api.schemas.public.base import Public, instant


class MeasuredPublic(Public):
    """`M`: one link direction's smoothed rates as of `t_us` (API.md, Links)."""

    t_us: int
    t: Any = instant("t_us")
    bytes_per_s: float | None
    utilization: float | None = Field(description="bytes_per_s * 8 / capacity")
    ecn_marks_per_s: float | None
    ecn_marked_fraction: float | None
    pfc_pauses_per_s: dict[str, float] = Field(description="Pause frames/s holding this direction back, per priority.")
    congested: bool


class LinkSeriesPublic(Public):
    link: str
    window_s: float
    retention_s: float
    ab: list[MeasuredPublic] = Field(description="From the link's `a` end to its `b` end, oldest first.")
    ba: list[MeasuredPublic]


class CongestedPublic(Public):
    link: str
    direction: str
    since_us: int
    t_us: int
    t: Any = instant("t_us")
    reason: str
    capacity_gbps: float
    measured_gbps: float | None
    utilization: float | None
    planned_gbps: float
    background_gbps: float | None = Field(description="max(0, measured - planned): load the plan does not explain.")
    ecn_marked_fraction: float | None
    pfc_pauses_per_s: float = Field(description="The largest smoothed pause rate over the priorities.")


class CongestionPublic(Public):
    congested: list[CongestedPublic]
