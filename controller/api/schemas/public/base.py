"""What every response schema shares: fields are passed through, instants are also ISO 8601,
and errors have one body.

- `Public` models document a response; they allow fields they do not declare (`extra="allow"`),
  so a field a newer part of c4 adds still reaches clients (API.md: fields may be added).
  Request schemas stay strict (`common.Strict`, unknown keys are a 422).
- Every instant `X_us` (`*_at_us`, `t_us`, `t_*_us`, `last_*_us`, ...; `services.clock.is_instant_field`)
  gets a sibling `X` holding the same instant as ISO 8601 UTC (`services.clock.iso8601`),
  declared ones and undeclared ones alike. Durations (`solve_ms`, `net_us`) are left alone.
- Routes serialize with `response_model_exclude_unset=True`: a response holds exactly what the
  service returned plus the ISO siblings; an optional field the service leaves out stays out.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from controller.services.clock import is_instant_field, iso8601


def instant(of: str) -> Any:
    """A declared ISO 8601 sibling of the `_us` field `of`."""
    return Field(None, description=f"`{of}` as ISO 8601 UTC (e.g. 2025-11-29T15:26:52.000000Z)",
                 json_schema_extra={"format": "date-time"})


class Public(BaseModel):
    """Base of response schemas (see the module docstring)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    _instant_pairs: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._instant_pairs = tuple((name, name[:-3]) for name in cls.model_fields
                                   if is_instant_field(name) and name[:-3] in cls.model_fields)

    def model_post_init(self, context: Any, /) -> None:
        fields_set = self.model_fields_set
        for us, iso in self._instant_pairs:
            if us in fields_set and iso not in fields_set:
                value = getattr(self, us)
                setattr(self, iso, None if value is None else iso8601(value))
        extra = self.__pydantic_extra__
        if extra:
            for name in [n for n in extra if is_instant_field(n)]:
                sibling = name[:-3]
                value = extra[name]
                if sibling not in extra and sibling not in type(self).model_fields and (value is None or
                                                                                        isinstance(value, int)):
                    extra[sibling] = None if value is None else iso8601(value)


class ErrorInfo(BaseModel):
    code: str = Field(description="Machine-readable: not_found, conflict, validation_error, unauthorized, ...",
                      examples=["not_found"])
    message: str = Field(description="One human sentence; for 422 it names the first offending field.",
                         examples=["no job named 'gpt-22b-run7'"])
    details: dict[str, Any] = Field(
        default_factory=dict,
        description="Structured context. A 422 lists every problem in `errors`: "
                    "`[{\"field\": \"links[3].b\", \"loc\": [\"links\", 3, \"b\"], \"message\": \"...\"}]`.")


class ErrorBody(BaseModel):
    """API.md's error body, the same for every refusal."""

    error: ErrorInfo


ERROR_DESCRIPTIONS: dict[int, str] = {
    401: "No bearer token, or an invalid or revoked one (`unauthorized`).",
    403: "The token's role may not do this (`forbidden`).",
    404: "The named thing does not exist (`not_found`).",
    409: "Conflicts with the current state (`conflict`): e.g. active jobs, an existing name, an "
         "isolated host, a resolved alarm, or a concurrent change (retry).",
    413: "The request body is larger than this route's limit (`x-c4-max-body-bytes`, at most "
         "`C4_MAX_BODY_BYTES`; `payload_too_large`, the limit in `details.max_body_bytes`).",
    422: "The request breaks a rule (`validation_error`); `details.errors[]` names each field.",
    429: "Too many heavy requests of this kind in progress (`too_many_requests`); retry after the "
         "`Retry-After` header's seconds.",
    503: "The database is unavailable, this process does not lead, or the request was cancelled by a "
         "shutdown (`database_unavailable`, `unavailable`, `cancelled`); retry after `Retry-After`.",
}

