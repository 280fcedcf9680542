"""The options every client command shares (kept free of heavy imports: `c4 --help` and
`c4 serve` load this module but never need an HTTP client or a table renderer)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Output(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


Server = Annotated[str | None, typer.Option("--server", "-s", help="Controller URL (else C4_URL, the config file, "
                                                                   "http://127.0.0.1:8000).", show_default=False)]
Token = Annotated[str | None, typer.Option("--token", help="API token (else C4_TOKEN or the config file).",
                                           show_default=False)]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, wide, json or yaml.")]
Watch = Annotated[bool, typer.Option("--watch", "-w", help="Show it again every --interval seconds (Ctrl-C stops).")]
Interval = Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between --watch refreshes.")]
