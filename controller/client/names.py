"""Suggestions for a link name the controller does not know: the canonical name of a link
typed with its ends reversed (`spine0:Ethernet0--leaf0:Ethernet2`), of a link named by its two
switches without ports (`leaf0--spine0`), or the closest names by spelling.

    >>> links = [{"name": "leaf0:Ethernet2--spine0:Ethernet0", "a": "leaf0", "a_port": "Ethernet2",
    ...           "b": "spine0", "b_port": "Ethernet0"}]
    >>> suggest("spine0:Ethernet0--leaf0:Ethernet2", links)
    ['leaf0:Ethernet2--spine0:Ethernet0']
    >>> suggest("spine0--leaf0", links)
    ['leaf0:Ethernet2--spine0:Ethernet0']
    >>> suggest("leaf0:Etherent2--spine0:Ethernet0", links)
    ['leaf0:Ethernet2--spine0:Ethernet0']
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

SEPARATOR = "--"
MAX_SUGGESTIONS = 5


def _endpoint(node: str, port: str) -> str:
    return f"{node}:{port}" if port else node


def suggest(name: str, links: Sequence[dict[str, Any]]) -> list[str]:
    """Names of known links the user probably meant (best first; empty if none is close)."""
    names = [str(link["name"]) for link in links]
    if name in names:
        return [name]
    if SEPARATOR in name:
        first, _, second = name.partition(SEPARATOR)
        typed = {first, second}
        by_ends = [str(link["name"]) for link in links
                   if {_endpoint(link["a"], link.get("a_port") or ""),
                       _endpoint(link["b"], link.get("b_port") or "")} == typed]
        if by_ends:
            return by_ends[:MAX_SUGGESTIONS]
        by_nodes = sorted(str(link["name"]) for link in links if {link["a"], link["b"]} == typed)
        if by_nodes:
            return by_nodes[:MAX_SUGGESTIONS]
    close = difflib.get_close_matches(name, names, n=MAX_SUGGESTIONS, cutoff=0.75)
    if not close:
        return []
    # Canonical names differ in a character or two: keep only the ones as close as the best.
    scores = {c: difflib.SequenceMatcher(None, name, c).ratio() for c in close}
    best = max(scores.values())
    return [c for c in close if scores[c] >= best - 0.01]


def hint(name: str, links: Sequence[dict[str, Any]]) -> str:
    """`did you mean ...?` for an unknown link name, or a pointer to `c4 get links`."""
    found = suggest(name, links)
    if not found:
        return "see `c4 get links`"
    if len(found) == 1:
        return f"did you mean {found[0]!r}?"
    return "did you mean one of " + ", ".join(repr(f) for f in found) + "?"
