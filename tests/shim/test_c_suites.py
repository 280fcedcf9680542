"""Runs the shim's C test suites (nccl_shim/tests/run_tests.sh through its Makefile) from
pytest, so `pytest tests/shim` builds the plugin and reports the C results: the normal build,
and the same suites under AddressSanitizer + UBSan. The C programs do the asserting; this file
only builds, runs and shows their PASS/FAIL lines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[2] / "nccl_shim"


def _make(*targets: str, timeout_s: int = 240) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("make or a C compiler is not installed")
    return subprocess.run(
        ["make", "-C", str(SHIM), *targets],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _report(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stdout + proc.stderr).splitlines()
    results = [ln for ln in lines if ln.startswith(("PASS", "FAIL", "SKIP", "=="))]
    print("\n".join(results))
    return "\n".join(lines[-60:])


def test_c_suites() -> None:
    proc = _make("test")
    tail = _report(proc)
    assert proc.returncode == 0, tail
    assert ", 0 failed" in proc.stdout


def test_c_suites_under_asan_and_ubsan() -> None:
    proc = _make("test-asan", timeout_s=400)
    tail = _report(proc)
    assert proc.returncode == 0, tail
    assert ", 0 failed" in proc.stdout
