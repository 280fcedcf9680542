"""The one rule every user-given name follows (jobs, hosts, NICs, ports, switches, links,
switch ports), in API terms:

- 1 to `NAME_MAX` (100) characters; NIC and port names (`nics[].name`, `ports[].name`,
  `switch_port`, `a_port`, `b_port`) 1 to `PORT_NAME_MAX` (64), so that every composed name
  (`host:nic:port`, a canonical link name) fits what the database stores;
- printable and visible: no white space, no control characters (C0, C1, DEL), no format
  characters (bidi overrides and isolates, zero-width spaces and joiners, the BOM, soft
  hyphen), no surrogate or private-use code points (unassigned ones are allowed: the next
  Unicode version may assign them, and the rule must not change with Python's);
- not `.` or `..`;
- names that stand in a URL path segment or a `host:nic:port` node (jobs, hosts, NICs, host
  ports) contain neither `/` nor `:`.

`problem(value, ...)` says what is wrong with a name in one sentence, or None; the API's
request schemas (`api/schemas/common.py`) and path and query parameters use it, so a 422
names the field with this sentence. Pure: no I/O.

>>> problem("leaf0") is None
True
>>> problem("job\\u202eexe")
'contains U+202E (a format character: bidi control or zero-width); names are visible characters only'
>>> print(problem(".."))
may not be '.' or '..'
>>> print(problem("host/0", path_segment=True))
may not contain '/' or ':'

"""

from __future__ import annotations

import unicodedata

NAME_MAX = 100
PORT_NAME_MAX = 64
# Unicode general categories a name may not hold: controls, format characters (bidi
# controls, zero-width characters, BOM), surrogates, private use, separators.
REFUSED_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character: bidi control or zero-width",
    "Cs": "a surrogate",
    "Co": "a private-use character",
    "Zs": "white space",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}
PATH_SEGMENT_REFUSED = "/:"
RULE = (f"1 to {NAME_MAX} visible characters (NIC and port names 1 to {PORT_NAME_MAX}): no white space, "
        "control, bidi or zero-width characters, not '.' or '..'; job, host, NIC and host-port names "
        "also without '/' or ':'")


def problem(value: str, max_length: int = NAME_MAX, path_segment: bool = False) -> str | None:
    """Why `value` is not a valid name, or None if it is one (see the module docstring)."""
    if not value:
        return "may not be empty"
    if len(value) > max_length:
        return f"is {len(value)} characters long; at most {max_length}"
    if value in (".", ".."):
        return "may not be '.' or '..'"
    for ch in value:
        what = REFUSED_CATEGORIES.get(unicodedata.category(ch))
        if what is not None:
            return f"contains U+{ord(ch):04X} ({what}); names are visible characters only"
        if ch.isspace():  # white space outside the Z categories (none today; cheap to be sure)
            return f"contains U+{ord(ch):04X} (white space); names are visible characters only"
        if path_segment and ch in PATH_SEGMENT_REFUSED:
            return "may not contain '/' or ':'"
    return None
