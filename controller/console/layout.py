"""How the console's fabric map groups switches, so a fabric of 1,000+ switches stays readable.

Pure: takes the switches (name, role, pod) and returns the grouping the browser draws; no
I/O, no web framework. The browser aggregates link values over this grouping itself.

Rules:
- Tiers go top to bottom: core, spine, leaf (those present).
- A fabric of at most `FLAT_MAX_SWITCHES` switches is *flat*: every tier is a row of single
  switches, hosts hang under their leaves.
- Otherwise the lower tiers are cut into *groups*: by pod when spines or leaves carry a pod
  (a pod holds its spines and leaves; those without one form the group "no pod"), else
  leaves in blocks of `LEAF_BLOCK` by name order. The tiers above the groups (cores; spines
  in a two-tier fabric) stay rows, drawn switch by switch up to `ROW_MAX` and in `ROW_MAX`
  equal blocks beyond.

Names sort naturally (leaf2 before leaf10). A two-pod clos3 with 40 cores reads::

    {"flat": False,
     "rows": [{"role": "core", "blocks": [
         {"id": "core0..core1", "label": "core0\u20131", "switches": ["core0", "core1"]}, ...]}],
     "groups": [{"id": "pod0", "label": "pod 0", "pod": 0,
                 "switches": ["pod0-spine0", ..., "pod0-leaf0", ...]}, ...],
     "group_roles": ["spine", "leaf"]}
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FLAT_MAX_SWITCHES = 48
ROW_MAX = 32
LEAF_BLOCK = 16
ROLES = ("core", "spine", "leaf")
DASH = "\u2013"


@dataclass(frozen=True, slots=True)
class SwitchInfo:
    name: str
    role: str
    pod: int | None = None


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digit runs by value: leaf2 < leaf10."""
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in re.split(r"(\d+)", name) if p)


def _block(names: Sequence[str]) -> dict[str, Any]:
    if len(names) == 1:
        return {"id": names[0], "label": names[0], "switches": list(names)}
    first, last = names[0], names[-1]
    stem = re.match(r"^(.*?)\d+$", first)
    # "leaf0-15" (with an en dash) when both are one stem and a number, else both names in full
    short = last[len(stem.group(1)):] if stem and re.fullmatch(re.escape(stem.group(1)) + r"\d+", last) else last
    return {"id": f"{first}..{last}", "label": f"{first}{DASH}{short}", "switches": list(names)}


def _row(role: str, names: Sequence[str]) -> dict[str, Any]:
    if len(names) <= ROW_MAX:
        return {"role": role, "blocks": [_block([n]) for n in names]}
    size = math.ceil(len(names) / ROW_MAX)
    return {"role": role, "blocks": [_block(names[i:i + size]) for i in range(0, len(names), size)]}


def layout(switches: Sequence[SwitchInfo]) -> dict[str, Any]:
    """The grouping of `switches` the console's map draws (see the module docstring)."""
    by_role: dict[str, list[SwitchInfo]] = {r: [] for r in ROLES}
    for s in switches:
        by_role.setdefault(s.role, []).append(s)
    for members in by_role.values():
        members.sort(key=lambda s: natural_key(s.name))
    present = [r for r in ROLES if by_role[r]]
    if len(switches) <= FLAT_MAX_SWITCHES:
        return {"flat": True, "rows": [{"role": r, "blocks": [_block([s.name]) for s in by_role[r]]} for r in present],
                "groups": [], "group_roles": []}
    podded = any(s.pod is not None for r in ("spine", "leaf") for s in by_role[r])
    if podded:
        above = [r for r in present if r == "core"]
        inside = [r for r in present if r != "core"]
        groups = _pod_groups([s for r in inside for s in by_role[r]], inside)
    else:
        above = [r for r in present if r != "leaf"]
        inside = ["leaf"] if by_role["leaf"] else []
        groups = _leaf_blocks([s.name for s in by_role["leaf"]])
    return {"flat": False, "rows": [_row(r, [s.name for s in by_role[r]]) for r in above],
            "groups": groups, "group_roles": inside}


def _pod_groups(members: Sequence[SwitchInfo], roles: Sequence[str]) -> list[dict[str, Any]]:
    pods: dict[int | None, list[SwitchInfo]] = {}
    for s in members:
        pods.setdefault(s.pod, []).append(s)
    order = {r: i for i, r in enumerate(roles)}
    out = []
    for pod in sorted(pods, key=lambda p: (p is None, p if p is not None else 0)):
        names = [s.name for s in sorted(pods[pod], key=lambda s: (order[s.role], natural_key(s.name)))]
        gid, label = (f"pod{pod}", f"pod {pod}") if pod is not None else ("no-pod", "no pod")
        out.append({"id": gid, "label": label, "pod": pod, "switches": names})
    return out


def _leaf_blocks(leaves: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for i in range(0, len(leaves), LEAF_BLOCK):
        names = list(leaves[i:i + LEAF_BLOCK])
        block = _block(names)
        out.append({"id": block["id"], "label": block["label"], "pod": None, "switches": names})
    return out
