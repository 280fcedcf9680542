"""Scenarios `c4-testbed run NAME` runs: a registry others add to.

A scenario is a function `(testbed, argv) -> exit code` registered under a name with a one-line
help; it parses its own options from `argv` (argparse), prints what it measured, and leaves
the fabric as it found it (faults undone, its processes stopped)::

    from testbed.scenarios import scenario

    @scenario("link-down", "a spine link fails under a running ring")
    def link_down(tb: Testbed, argv: list[str]) -> int:
        ...

Modules listed in `BUILTIN` are imported on first use, so their scenarios register themselves.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from testbed.fabric import Testbed, TestbedError

Runner = Callable[[Testbed, list[str]], int]


@dataclass(frozen=True)
class Scenario:
    name: str
    help: str
    run: Runner


SCENARIOS: dict[str, Scenario] = {}
BUILTIN: tuple[str, ...] = ("testbed.scenarios.workloads", "testbed.scenarios.loop")
_loaded = False


def scenario(name: str, help: str) -> Callable[[Runner], Runner]:
    def register(fn: Runner) -> Runner:
        if name in SCENARIOS and SCENARIOS[name].run is not fn:
            raise ValueError(f"scenario {name!r} is registered twice")
        SCENARIOS[name] = Scenario(name, help, fn)
        return fn

    return register


def load_builtin() -> None:
    global _loaded
    if not _loaded:
        for module in BUILTIN:
            importlib.import_module(module)
        _loaded = True


def run_scenario(name: str, tb: Testbed, argv: list[str]) -> int:
    load_builtin()
    if name not in SCENARIOS:
        raise TestbedError(f"no scenario {name!r}; registered: {', '.join(sorted(SCENARIOS)) or 'none'}")
    return SCENARIOS[name].run(tb, argv)
