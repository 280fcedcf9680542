"""The fuzz tier: schemathesis over every operation of a live `c4 serve` with an admin token,
a fixed seed and at least 1,000 cases; no server error, no undocumented status or header, no
response off its schema; the server's memory stays under a documented bound throughout.

`C4_FUZZ_MAX_EXAMPLES` (default 15 per operation and phase) sizes the run; bench.hardening
runs the same with more. Figures and the bound: docs/SECURITY.md and bench/README.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support import fuzz
from tests.support.serve import RssSampler, served

pytestmark = pytest.mark.fuzz
MIN_CASES = 1000
MAX_EXAMPLES = int(os.environ.get("C4_FUZZ_MAX_EXAMPLES", "15"))
RSS_BOUND_BYTES = 768 << 20  # docs/SECURITY.md: the fuzz server's resident memory, whole run


def test_schemathesis_finds_no_server_error_or_undocumented_answer(tmp_path: Path) -> None:
    if not (Path(sys.executable).parent / "st").exists():
        pytest.skip("fuzz tier: schemathesis is not installed (make test installs the test extras)")
    with served(tmp_path, **fuzz.FUZZ_SETTINGS) as server, RssSampler(server.proc.pid) as rss:
        run = fuzz.run(server, tmp_path, MAX_EXAMPLES)
        alive = server.proc.poll() is None
    operations = run.report["operations"]
    print(f"\nfuzz: {run.cases} cases over {operations['tested']} operations in {run.wall_s:.0f} s, "
          f"seed {fuzz.SEED}; server RSS peak {rss.peak / 2**20:.0f} MiB")
    assert alive, "the server died during the run"
    assert operations["tested"] == operations["total"] and operations["errored"] == 0, operations
    assert run.cases >= MIN_CASES, f"only {run.cases} cases; raise C4_FUZZ_MAX_EXAMPLES"
    assert run.failures == [] and run.errors == [], run.output[-6000:]
    assert rss.peak < RSS_BOUND_BYTES, f"RSS peak {rss.peak / 2**20:.0f} MiB"
