"""Two `c4 serve` processes on one real PostgreSQL: kill -9 the planner's leader while it plans a
job (its record shows the planning phase) and the other process takes the lead (the advisory
lock died with the leader's connection) and finishes it: the job ends planned, with every
flow's assignment stored once, readable from either process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from bench.plan.scenarios import scale_fabric, scale_job
from controller.services.jobs import spec_to_document
from controller.topology.document import to_document
from tests.support.serve import free_port

pytestmark = pytest.mark.postgres
PG_URL = os.environ.get("C4_TEST_DATABASE_URL")
TOKEN = "failover-admin-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def database() -> Iterator[str]:
    """A database of its own on the test server (the suite's is reset by other tests)."""
    if not PG_URL:
        pytest.skip("PostgreSQL tier: C4_TEST_DATABASE_URL is not set (make test starts a server and sets it)")
    url = make_url(PG_URL)
    name = f"c4failover_{os.getpid()}"
    admin = url.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _serve(url: str, tmp: Path, label: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "C4_DATABASE_URL": url, "C4_ADMIN_TOKEN": TOKEN, "C4_LOG_LEVEL": "warning",
           "C4_DATA_DIR": str(tmp)}
    with (tmp / f"{label}.log").open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "serve", "--port", str(port), "--no-migrate"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, (tmp / f"{label}.log").read_text()[-2000:]
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{label} not ready in 60 s"
        time.sleep(0.2)


def _leads(base: str) -> bool:
    return bool(httpx.get(f"{base}/readyz", timeout=5).json()["checks"]["leader"] == "this process")


def test_kill_9_the_leader_mid_plan_and_the_other_process_finishes_it(database: str, tmp_path: Path) -> None:
    env = {**os.environ, "C4_DATABASE_URL": database}
    subprocess.run([sys.executable, "-m", "controller.cli", "migrate"], env=env, check=True, capture_output=True,
                   timeout=120)
    procs = [_serve(database, tmp_path, "first"), _serve(database, tmp_path, "second")]
    try:
        deadline = time.monotonic() + 15
        while not any(_leads(b) for _, b in procs):
            assert time.monotonic() < deadline, "nobody leads"
            time.sleep(0.2)
        leader = next(p for p in procs if _leads(p[1]))
        other = next(p for p in procs if p is not leader)
        assert not _leads(other[1])
        fabric = scale_fabric()
        r = httpx.put(f"{other[1]}/v1/topology", json=to_document(fabric), headers=HEADERS, timeout=60)
        assert r.status_code == 200, r.text
        # 128 hosts x 4 rails x 8 channels x 4 QPs: 16,384 flows, a plan of a second or more
        spec = spec_to_document(scale_job(fabric, 128, 8, 4))
        r = httpx.post(f"{other[1]}/v1/jobs", json=spec, headers=HEADERS, timeout=60)
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 60
        while True:  # the leader shows the phase once a plan has run 0.5 s: it is mid-plan
            job = httpx.get(f"{other[1]}/v1/jobs/big", headers=HEADERS, timeout=10).json()
            assert job["status"] == "pending", f"planned before it could be interrupted: {job['status']}"
            if job.get("progress"):
                break
            assert time.monotonic() < deadline, "the leader never started planning"
            time.sleep(0.05)
        leader[0].send_signal(signal.SIGKILL)
        leader[0].wait(10)
        assert httpx.get(f"{other[1]}/v1/jobs/big", headers=HEADERS, timeout=10).json()["status"] == "pending"
        deadline = time.monotonic() + 90
        while True:
            job = httpx.get(f"{other[1]}/v1/jobs/big", headers=HEADERS, timeout=10).json()
            if job["status"] != "pending":
                break
            assert time.monotonic() < deadline, "the other process did not finish the plan in 90 s"
            time.sleep(0.2)
        assert _leads(other[1])
        assert job["status"] == "planned", job.get("error")
        assert "progress" not in job and job["version"] == 1
        plan = job["plan"]
        assert plan["flows"] == 16384 and plan["lower_bound"] <= plan["max_link_utilization"] + 1e-9
        got = httpx.get(f"{other[1]}/v1/jobs/big/assignments", headers=HEADERS, timeout=60).json()
        assert got["version"] == 1 and len(got["assignments"]) == 16384
        keys = {(a["src_rank"], a["dst_rank"], a["channel"], a["qp"]) for a in got["assignments"]}
        assert len(keys) == 16384  # each flow stored once: nothing of the killed plan was half-written
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
