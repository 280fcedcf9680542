"""The shim's path-steering test in real network namespaces (nccl_shim/tests/netns_ecmp.sh):
two namespaces joined by a two-path ECMP route hashed on L4 ports; each socket's bytes must
appear on the veth its assigned source port hashes to. Needs root and `ip netns`; skipped with
the reason otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[2] / "nccl_shim"
SKIP = 77


def _netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "iproute2 'ip' is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"'ip netns' does not work here: {probe.stderr.strip()}"
    return None


@pytest.mark.netns
def test_bytes_follow_assigned_ports_over_ecmp() -> None:
    reason = _netns_unavailable()
    if reason:
        print(f"SKIP netns-ecmp: {reason}")
        pytest.skip(reason)
    build = subprocess.run(["make", "-C", str(SHIM)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    proc = subprocess.run(
        [str(SHIM / "tests" / "netns_ecmp.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "B": "build"},
    )
    out = proc.stdout + proc.stderr
    print(out)
    if proc.returncode == SKIP:
        pytest.skip(out.strip().splitlines()[-1] if out.strip() else "skipped by the script")
    assert proc.returncode == 0, out
    assert out.count("PASS netns-ecmp") == 3
