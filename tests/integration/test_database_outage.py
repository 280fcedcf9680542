"""The controller survives its database dying: readiness and metrics say so, requests get
503 in the error format, and it recovers by itself when the database returns."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store.migrate import upgrade
from tests.unit.topology.fabrics import tiny_document

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test-postgres.sh"


def _pg(action: str, env: dict[str, str]) -> str:
    out = subprocess.run([str(SCRIPT), action], capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def own_postgres() -> Iterator[tuple[str, dict[str, str]]]:
    if not shutil.which("runuser") or not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        pytest.skip("database outage tier: needs Debian's postgresql server (make test installs it)")
    if os.geteuid() != 0:
        pytest.skip("database outage tier: needs root to run a private PostgreSQL as user postgres")
    env = {"C4_TEST_PG_DIR": tempfile.mkdtemp(prefix="c4-pg-outage-"), "C4_TEST_PG_PORT": "54339"}
    url = _pg("start", env)
    try:
        yield url, env
    finally:
        _pg("stop", env)
        shutil.rmtree(env["C4_TEST_PG_DIR"], ignore_errors=True)


def test_database_death_is_reported_and_survived(own_postgres: tuple[str, dict[str, str]]) -> None:
    url, env = own_postgres
    upgrade(url)
    rt = Runtime.from_settings(Settings(database_url=url, admin_token="t"))
    with TestClient(create_app(runtime=rt), headers={"Authorization": "Bearer t"}) as client:
        assert client.put("/v1/topology", json=tiny_document()).status_code == 200
        assert client.get("/readyz").status_code == 200

        _pg("stop", env)
        r = client.get("/readyz")
        assert r.status_code == 503 and "unreachable" in r.json()["checks"]["database"]
        assert "c4_database_up 0.0" in client.get("/metrics").text
        assert client.get("/healthz").status_code == 200
        r = client.get("/v1/topology")
        assert r.status_code == 503 and r.json()["error"]["code"] == "database_unavailable"

        _pg("start", env)
        assert client.get("/readyz").status_code == 200
        assert client.get("/v1/topology").json()["name"] == "tiny"
        assert "c4_database_up 1.0" in client.get("/metrics").text
    rt.engine.dispose()
