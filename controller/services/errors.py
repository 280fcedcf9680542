"""Refusals a use case can answer with; `api.errors` maps each to an HTTP status."""

from __future__ import annotations

from typing import Any

from controller.domain.problems import Problem


class ServiceError(Exception):
    code = "error"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class NotFound(ServiceError):
    code = "not_found"


class Conflict(ServiceError):
    code = "conflict"


class Invalid(ServiceError):
    """Input that is well-formed but breaks a rule; carries the field paths."""

    code = "validation_error"

    def __init__(self, problems: list[Problem]) -> None:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{first.field}: {first.message}{more}", {
            "errors": [{"field": p.field, "loc": list(p.loc), "message": p.message} for p in problems]
        })
        self.problems = problems


class Unavailable(ServiceError):
    code = "unavailable"
