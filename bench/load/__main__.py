"""`python -m bench.load PART [options]`: PART `churn` is the planner half (`bench.load.churn`:
job bursts, churn at 100 and 1,000 active jobs, assignment reads). Each part parses its own
options (`python -m bench.load PART --help`)."""

from __future__ import annotations

import importlib
import sys

PARTS = {"churn": "bench.load.churn"}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in PARTS:
        raise SystemExit(f"usage: python -m bench.load {{{','.join(sorted(PARTS))}}} [options]")
    importlib.import_module(PARTS[sys.argv[1]]).main(sys.argv[2:])


if __name__ == "__main__":
    main()
