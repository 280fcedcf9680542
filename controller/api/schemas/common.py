"""Base classes and field types every request schema shares: unknown keys are refused, names
follow `domain.names`' one rule, integers fit the database's columns.

- `Name`: switches, ports, links, telemetry's job and host (a link name may hold ':' and '/').
- `PathName`: jobs, hosts, NICs, host ports — names that stand in a URL path segment
  (`/v1/jobs/{name}`) or a `host:nic:port` node: also without '/' and ':'.
- `PortName`: NIC-side and switch-side port names (`switch_port`, `a_port`), at most 64.
- `NameInPath`, `LinkNameInPath`, `RowIdInPath`, `NameFilter`, `HostFilter`: the same rules for
  path and query parameters.
- `Int32`, `Int64`, `RowIdInPath`: integers bounded to the column that stores them (a value SQLite or
  PostgreSQL cannot hold is a 422 naming the field, never a 500).

The JSON schema of a name carries a `pattern` that spells the rule for fuzzers and clients
(the refused code points of the Basic Multilingual Plane, as ranges; `names.RULE` says it in
words); the check itself is `domain.names.problem`, which also refuses what `PATTERN_SKIPS`
leaves out of the pattern.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from controller.domain import names

INT32_MAX = 2**31 - 1  # Integer columns (PostgreSQL int4)
INT64_MAX = 2**63 - 1  # BigInteger columns; SQLite's integers
LINK_NAME_MAX = 400  # links.name (a canonical host-port link name is at most 397 characters)


# Left out of the pattern, still refused by the check: surrogates (no other engine compiles them
# in a pattern) and private use (generators crawl on their huge ranges); and every refused code
# point past the Basic Multilingual Plane (format tags, private use planes), for the same reason.
PATTERN_SKIPS = ("Cs", "Co")


@functools.lru_cache(maxsize=2)
def name_pattern(path_segment: bool) -> str:
    """The rule as a regular expression over the Basic Multilingual Plane (see `PATTERN_SKIPS`),
    code points written as `\\uXXXX` escapes (ECMA and Python patterns read them alike)."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x10000):
        category = unicodedata.category(chr(code))
        if category in PATTERN_SKIPS:
            continue
        if category in names.REFUSED_CATEGORIES or chr(code).isspace():
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))

    def char(code: int) -> str:
        return f"\\u{code:04x}"

    refused = "".join(char(a) if a == b else f"{char(a)}-{char(b)}" for a, b in ranges)
    return rf"^(?!\.\.?$)[^{refused}{'/:' if path_segment else ''}]+$"


def _pattern(path_segment: bool) -> Any:
    def extra(schema: dict[str, Any]) -> None:
        schema["pattern"] = name_pattern(path_segment)

    return extra


def _checker(max_length: int, path_segment: bool) -> Callable[[str], str]:
    def check(value: str) -> str:
        why = names.problem(value, max_length, path_segment)
        if why is not None:
            raise ValueError(f"{why} ({names.RULE})")
        return value

    return check


def _rule(max_length: int, path_segment: bool) -> AfterValidator:
    return AfterValidator(_checker(max_length, path_segment))


def _filter(path_segment: bool) -> AfterValidator:
    rule = _checker(names.NAME_MAX, path_segment)

    def check(value: str | None) -> str | None:  # an empty filter matches nothing: no rule to apply
        return value if not value else rule(value)

    return AfterValidator(check)


Name = Annotated[str, Field(min_length=1, max_length=names.NAME_MAX, json_schema_extra=_pattern(False)),
                 _rule(names.NAME_MAX, False)]
PathName = Annotated[str, Field(min_length=1, max_length=names.NAME_MAX, json_schema_extra=_pattern(True)),
                     _rule(names.NAME_MAX, True)]
PortName = Annotated[str, Field(min_length=1, max_length=names.PORT_NAME_MAX, json_schema_extra=_pattern(False)),
                     _rule(names.PORT_NAME_MAX, False)]
PathPortName = Annotated[str, Field(min_length=1, max_length=names.PORT_NAME_MAX, json_schema_extra=_pattern(True)),
                         _rule(names.PORT_NAME_MAX, True)]
LinkName = Annotated[str, Field(min_length=1, max_length=LINK_NAME_MAX, json_schema_extra=_pattern(False)),
                     _rule(LINK_NAME_MAX, False)]

Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]

# Path and query parameters (a broken rule is a 422 naming `path.name` or `query.host`).
NameInPath = Annotated[str, Path(min_length=1, max_length=names.NAME_MAX, json_schema_extra=_pattern(True),
                                 description="A name (job, host): " + names.RULE),
                       _rule(names.NAME_MAX, True)]
LinkNameInPath = Annotated[str, Path(min_length=1, max_length=LINK_NAME_MAX, json_schema_extra=_pattern(False),
                                     description="A link's name (canonical: `a:port--b:port`)."),
                           _rule(LINK_NAME_MAX, False)]
RowIdInPath = Annotated[int, Path(ge=1, le=INT32_MAX, description="A row id (1 .. 2^31-1).")]
NameFilter = Annotated[str | None, Query(max_length=names.NAME_MAX, description="Only this name."), _filter(False)]
HostFilter = Annotated[str | None, Query(max_length=names.NAME_MAX, description="Only this host."), _filter(True)]


class Strict(BaseModel):
    """Unknown keys are refused, and JSON types are not coerced: `true` or `"5"` is not an
    integer, `1.5` not an integer either (an integer is a valid number, though)."""

    model_config = ConfigDict(extra="forbid", strict=True)
