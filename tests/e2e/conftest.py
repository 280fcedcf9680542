"""The testbed tier: real namespaces, the kernel's ECMP, Debian's snmpd, real sockets.

Needs root, iproute2 (`ip netns`), tc, nft and snmpd (`make test` installs them); every test
here is skipped with the reason printed otherwise. One small dual-ToR fabric serves the
tier's tests; its prefix is unique per run (`e2e<pid>`) and it is torn down when the tier
ends (not at the end of the whole session), also when a test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from testbed import FabricSpec, Testbed

TOOLS = ("ip", "tc", "nft", "snmpd", "snmpget")


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the testbed tier needs root (network namespaces, veth, tc, nft)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"the testbed tier needs {', '.join(missing)} (make test installs them)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"'ip netns' does not work here: {probe.stderr.strip()}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = unavailable()
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.netns)
            item.add_marker(pytest.mark.e2e)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
    if reason and any(str(i.fspath).startswith(here) for i in items):
        print(f"\nSKIP testbed e2e tier: {reason}")


SPEC = FabricSpec(leaves=2, spines=2, hosts_per_leaf=2, dual_tor=True, rate_mbit=100, seed=7)


@pytest.fixture(scope="package")
def fabric() -> Iterator[Testbed]:
    tb = Testbed(f"e2e{os.getpid() % 10_000_000}")
    t = tb.up(SPEC)
    print(f"\ntestbed e2e: {tb.prefix} up in {t.total_s:.2f} s")
    try:
        yield tb
    finally:
        r = tb.down()
        print(f"\ntestbed e2e: {tb.prefix} down: {len(r.namespaces)} namespaces, {len(r.killed)} processes, {r.elapsed_s:.2f} s")
