"""`c4 demo` as `make demo` runs it: ready within 60 s from a fresh database, the generated
fabric served, two jobs planned (and logged as events) and live simulated telemetry flowing
into the detectors; the telemetry follows the demo jobs' own rings."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from controller.services import demo_traffic, jobs
from controller.te import flows as job_flows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_serves_a_fabric_within_60_s(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "C4_DATA_DIR": str(tmp_path), "C4_LOG_FORMAT": "json"}
    (tmp_path / "demo.db").write_text("not a database: a fresh demo run must not read it")
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
        console = re.search(r"console:\s+(http\S+)", log.read_text())  # the URL it prints serves the page
        assert console and httpx.get(console.group(1), timeout=10, follow_redirects=True).status_code == 200, \
            log.read_text()
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
        banner = log.read_text()
        assert f"API docs:  http://127.0.0.1:{port}/docs" in banner and "console:" in banner
        assert f"export C4_URL=http://127.0.0.1:{port} C4_TOKEN={token.group(1)}" in banner
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    planned = {e["job"]: e for e in events if e.get("event") == "job.planned"}
    assert set(planned) == {"demo-a", "demo-b"}, events
    assert all(e["level"] == "info" and e["max_link_utilization"] >= e["lower_bound"] > 0 for e in planned.values())
    assert token.group(1) not in "".join(json.dumps(e) for e in events)  # the token is shown once, never logged


def test_demo_telemetry_names_only_connections_of_the_demo_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_traffic, "FIRST_CHUNK_S", 10.0)
    demo_jobs = [demo_traffic.DemoJob(name, first, n) for name, first, n in jobs.DEMO_JOBS]
    records = [r for _, _, r in demo_traffic.DemoTraffic(None, demo_jobs, 4).chunk(0, 1_764_430_000_000_000)  # type: ignore[arg-type]
               if r is not None]
    assert records
    for name, first, n in jobs.DEMO_JOBS:
        spec = jobs.spec_from_document({"name": name, "traffic": [
            {"pattern": "ring", "ranks": list(range(n)), "channels": 2, "qps_per_connection": 2}],
            "ranks": [{"rank": r, "host": f"host{first + r}", "nic": "mlx5_0"} for r in range(n)]})
        planned = {(f.key.src_rank, f.key.dst_rank) for f in job_flows.derive_flows(spec)}
        mine = [r for r in records if r.job == name]
        assert mine and {r.host for r in mine} <= {f"host{first + r}" for r in range(n)}
        for r in mine:
            assert r.comm == "world-0" and all(not p.flows for p in r.peers)
            for p in r.peers:
                assert ((r.rank, p.peer) if p.dir == "send" else (p.peer, r.rank)) in planned
