"""Base classes every request schema shares: unknown keys are refused."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

# Names of switches and ports: no white space (port names like "Ethernet1/1" are fine).
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\s]+$")]
# Names that stand in a URL path segment (/v1/jobs/{name}, /v1/hosts/{name}) or in a
# `host:nic:port` node name: no white space, no '/', no ':'.
PathName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\s/:]+$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
