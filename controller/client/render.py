"""How the CLI shows what the API returns: aligned tables (rich), `-o wide|json|yaml`, ages,
and `--watch`.

Tables have no borders and one header row, like kubectl's; on a terminal they fit its width,
piped they are never wrapped or coloured. `-o json` prints the API's own document and
`-o yaml` the same as YAML, so scripts get every field (those newer controllers add too).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from controller.client.options import Output


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(file=stream, highlight=False, soft_wrap=not tty, width=None if tty else 100_000,
                   no_color=not tty)


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    value: Callable[[dict[str, Any]], Any]
    wide_only: bool = False
    right: bool = False


def age(t_us: Any, now_s: float | None = None) -> str:
    """How long ago `t_us` was, as kubectl writes it: 45s, 12m, 3h, 5d."""
    if not isinstance(t_us, int):
        return "-"
    seconds = max(0, int((now_s if now_s is not None else time.time()) - t_us / 1e6))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def num(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value).lower()
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return num(value)
    if isinstance(value, list):
        return ",".join(cell(v) for v in value) or "-"
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], wide: bool,
          known: frozenset[str] | None = None) -> Table:
    """A borderless table. With `known` (the fields the columns show), `wide` also shows every
    other scalar field the API sent (a newer controller's additions), except instants."""
    shown = [c for c in columns if wide or not c.wide_only]
    extras: list[str] = []
    if wide and known is not None:
        for row in rows:
            for key, value in row.items():
                if (key not in known and key not in extras and not isinstance(value, dict | list)
                        and not key.endswith("_us") and f"{key}_us" not in row):
                    extras.append(key)
    out = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for c in shown:
        out.add_column(c.header, justify="right" if c.right else "left", no_wrap=True)
    for key in extras:
        out.add_column(key.upper().replace("_", "-"), no_wrap=True)
    for row in rows:
        out.add_row(*[cell(c.value(row)) for c in shown], *[cell(row.get(k)) for k in extras])
    return out


def document(doc: Any, output: Output) -> str:
    if output == Output.YAML:
        return str(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)).rstrip("\n")
    return json.dumps(doc, indent=2, ensure_ascii=False)


def show(renderable: RenderableType | str) -> None:
    """Print to stdout: styled on a terminal, plain text without trailing blanks when piped."""
    out = console()
    if not out.is_terminal:
        print(_as_text(renderable), flush=True)
    elif isinstance(renderable, str):
        out.print(Text(renderable))
    else:
        out.print(renderable)


def watch(fetch: Callable[[], tuple[object, RenderableType | str]], interval_s: float,
          on_error: Callable[[Exception], str | None]) -> None:
    """Show what `fetch()` returns (the data, and its view) again every `interval_s` until
    interrupted: redrawn in place on a terminal; piped, printed again only when the data
    changed (not when only an age moved on). `on_error` turns a failure into a line to show
    while retrying, or raises to stop."""
    out = console()
    last: object = None
    try:
        if out.is_terminal:
            with Live(console=out, auto_refresh=False, transient=False) as live:
                while True:
                    try:
                        view: RenderableType | str = fetch()[1]
                    except Exception as exc:
                        view = Group(Text(on_error(exc) or "", style="red"))
                    live.update(Text(view) if isinstance(view, str) else view, refresh=True)
                    time.sleep(interval_s)
        first = True
        while True:
            try:
                data, view = fetch()
            except Exception as exc:
                print(on_error(exc) or "", file=sys.stderr, flush=True)
                time.sleep(interval_s)
                continue
            if first or data != last:
                if not first:
                    print(flush=True)
                print(_as_text(view), flush=True)
                last, first = data, False
            time.sleep(interval_s)
    except KeyboardInterrupt:
        return


def _as_text(view: RenderableType | str) -> str:
    if isinstance(view, str):
        return view
    capture = Console(width=100_000, no_color=True, highlight=False, soft_wrap=True)
    with capture.capture() as buffer:
        capture.print(view)
    return "\n".join(line.rstrip() for line in buffer.get().rstrip("\n").splitlines())
