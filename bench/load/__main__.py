"""`python -m bench.load PART [options]`: run one part of bench/load (a module of this package
with a `main(argv)`): `churn` (the planner half), `telemetry`, or `mix` (every client at once);
each parses its own options
(`python -m bench.load PART --help`)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def parts() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                  if not m.name.startswith("_") and hasattr(importlib.import_module(f"bench.load.{m.name}"), "main"))


def main(argv: list[str]) -> int:
    known = parts()
    if not argv or argv[0] not in known:
        print(f"usage: python -m bench.load {{{','.join(known)}}} [options]", file=sys.stderr)
        return 2
    result = importlib.import_module(f"bench.load.{argv[0]}").main(argv[1:])
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
