"""Base classes every request schema shares: unknown keys are refused."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\s]+$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
