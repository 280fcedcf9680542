"""The node agent's process tiers: real `c4 serve`, real `c4-node-agent`, the real shim built
by make, driven by nccl_shim's fake NCCL. `test_agent_loopback.py` runs anywhere;
`test_agent_testbed.py` needs root and the testbed's tools (network namespaces, the kernel's
ECMP), and is skipped with the reason printed otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

TOOLS = ("ip", "tc", "nft", "make", "cc")


def netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the agent's testbed tier needs root (network namespaces, raw sockets)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"the agent's testbed tier needs {', '.join(missing)} (make test installs them)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"'ip netns' does not work here: {probe.stderr.strip()}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = netns_unavailable()
    for item in items:
        path = str(item.fspath)
        if path.endswith("test_agent_testbed.py"):
            item.add_marker(pytest.mark.netns)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
    if reason and any(str(i.fspath).endswith("test_agent_testbed.py") for i in items):
        print(f"\nSKIP node agent testbed tier: {reason}")
