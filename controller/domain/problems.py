"""A problem found in input: where (a field path) and what.

Validators in the pure core return lists of these instead of raising; the API turns them
into a 422 that names the field.
"""

from __future__ import annotations

from dataclasses import dataclass

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    loc: Loc
    message: str

    @property
    def field(self) -> str:
        """The dotted field path, e.g. `links[3].b`."""
        out = ""
        for part in self.loc:
            if isinstance(part, int):
                out += f"[{part}]"
            else:
                out += f".{part}" if out else part
        return out
