"""One process leads: it runs the background workers; another takes over when it stops."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.services.leader import RETRY_S
from controller.services.runtime import Runtime
from controller.settings import Settings

HEADERS = {"Authorization": "Bearer test-admin-token"}


def _ready(client: TestClient) -> dict[str, str]:
    checks: dict[str, str] = client.get("/readyz").json()["checks"]
    return checks


def test_one_leader_and_takeover(settings: Settings) -> None:
    first_rt, second_rt = Runtime.from_settings(settings), Runtime.from_settings(settings)
    first = TestClient(create_app(runtime=first_rt), headers=HEADERS)
    second = TestClient(create_app(runtime=second_rt), headers=HEADERS)
    first.__enter__()
    second.__enter__()
    try:
        first.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 1})
        assert _ready(first)["leader"] == "this process" and _ready(first)["worker:planner"] == "ok"
        assert _ready(second)["leader"] == "another process"
        assert "worker:planner" not in _ready(second)
        record = {"job": "nope", "comm": "c", "rank": 0, "nranks": 1, "op": "AllReduce", "seq": 0, "bytes": 1,
                  "t_start_us": 1, "t_end_us": 2, "peers": []}
        r = second.post("/v1/telemetry/collectives", json={"host": "host0", "records": [record]})
        if settings.resolved_database_url().startswith("postgresql"):
            # Sharded telemetry: every replica accepts (and validates) telemetry.
            assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["field"] == "records[0].job"
            assert second.post("/v1/telemetry/collectives", json={"host": "host0", "records": []}).status_code == 202
            assert "sharded" in _ready(second)["telemetry"]
        else:
            assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
        # Requests are served by every process; only the background work is the leader's.
        assert second.get("/v1/topology").status_code == 200
        first.__exit__(None, None, None)
        # The first process stopped: the second, still running, takes over.
        deadline = time.monotonic() + 3 * RETRY_S + 2
        while time.monotonic() < deadline and _ready(second)["leader"] != "this process":
            time.sleep(0.2)
        assert _ready(second)["leader"] == "this process"
        assert _ready(second)["worker:planner"] == "ok"
    finally:
        second.__exit__(None, None, None)
    first_rt.engine.dispose()
    second_rt.engine.dispose()
