"""`c4 demo` as `make demo` runs it: ready within 60 s, the generated fabric served, two jobs
planned and live simulated telemetry flowing into the detectors."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_serves_a_fabric_within_60_s(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "C4_DATA_DIR": str(tmp_path)}
    env.pop("C4_ADMIN_TOKEN", None)
    env.pop("C4_DATABASE_URL", None)
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "demo", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    ready = True
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert ready, log.read_text()
        token = re.search(r"admin token: (\S+)", log.read_text())
        assert token, log.read_text()
        r = httpx.get(f"http://127.0.0.1:{port}/v1/topology",
                      headers={"Authorization": f"Bearer {token.group(1)}"}, timeout=10)
        assert r.status_code == 200
        assert len(r.json()["hosts"]) == 32 and len(r.json()["switches"]) == 12
        headers = {"Authorization": f"Bearer {token.group(1)}"}
        # The two demo jobs get planned and their simulated telemetry reaches the detectors.
        while time.monotonic() < deadline + 30:
            jobs = httpx.get(f"http://127.0.0.1:{port}/v1/jobs", headers=headers, timeout=10).json()["jobs"]
            records = re.search(r"^c4_telemetry_records_total (\S+)$",
                                httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text, re.M)
            if [j["status"] for j in jobs] == ["planned", "planned"] and records and float(records.group(1)) > 0:
                break
            time.sleep(0.5)
        assert [j["status"] for j in jobs] == ["planned", "planned"], jobs
        assert records and float(records.group(1)) > 0
    finally:
        proc.terminate()
        proc.wait(timeout=20)
