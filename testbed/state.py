"""What a testbed keeps between commands: its run directory and `state.json`.

`<run dir>/<prefix>/state.json` holds the spec, the management network and the faults applied
since `up`; the plan is recomputed from them (`plan.make_plan` is deterministic). The run
directory also holds the snmpd configs, agent sockets and job rendezvous files. It lives on
/run (tmpfs, like /run/netns), so a reboot forgets testbeds together with their namespaces.
`C4_TESTBED_RUN_DIR` moves it. A global lock file (/run/c4-testbed.lock) serialises `up` and
`down`, so two testbeds never pick the same management network.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from testbed.commands import PortState
from testbed.plan import FabricSpec, Plan, make_plan

DEFAULT_RUN_DIR = Path("/run/c4-testbed")
# One lock for every testbed on the machine, whatever its run directory: management networks
# are allocated in the one root namespace.
LOCK_PATH = Path("/run/c4-testbed.lock")
MGMT_POOL = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544 benchmarking range
MGMT_PREFIXLEN = 20


def run_root() -> Path:
    return Path(os.environ.get("C4_TESTBED_RUN_DIR", str(DEFAULT_RUN_DIR)))


def run_dir(prefix: str) -> Path:
    return run_root() / prefix


@contextmanager
def global_lock() -> Iterator[None]:
    run_root().mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def save(prefix: str, spec: FabricSpec, mgmt_net: str, extra: dict[str, Any]) -> None:
    d = run_dir(prefix)
    d.mkdir(parents=True, exist_ok=True)
    doc = {"prefix": prefix, "spec": asdict(spec), "mgmt_net": mgmt_net, **extra}
    tmp = d / "state.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tmp.replace(d / "state.json")


def load(prefix: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((run_dir(prefix) / "state.json").read_text())
    except FileNotFoundError:
        return None
    return data


def plan_of(data: dict[str, Any]) -> Plan:
    return make_plan(FabricSpec(**data["spec"]), data["prefix"], data["mgmt_net"])


def overrides_of(data: dict[str, Any]) -> dict[tuple[str, str], PortState]:
    out = {}
    for key, value in data.get("overrides", {}).items():
        node, ifname = key.split("/", 1)
        out[(node, ifname)] = PortState(**value)
    return out


def overrides_doc(overrides: dict[tuple[str, str], PortState]) -> dict[str, Any]:
    return {f"{node}/{ifname}": asdict(state) for (node, ifname), state in sorted(overrides.items())}


def known_prefixes() -> list[str]:
    root = run_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "state.json").exists())


def pick_mgmt_net(root_addresses: list[str]) -> str:
    """The first /20 of 198.18.0.0/15 that no root-namespace address and no other testbed
    (by its state file) uses. Call with the global lock held."""
    taken = [ipaddress.ip_network(a, strict=False) for a in root_addresses]
    for prefix in known_prefixes():
        data = load(prefix)
        if data:
            taken.append(ipaddress.ip_network(data["mgmt_net"]))
    for candidate in MGMT_POOL.subnets(new_prefix=MGMT_PREFIXLEN):
        if not any(candidate.overlaps(t) for t in taken):
            return str(candidate)
    raise RuntimeError(f"every /{MGMT_PREFIXLEN} of {MGMT_POOL} is in use by other testbeds")
