"""A job that loses every path fails visibly (version, webhook) and comes back with the link;
bad ranks never reach the planner; a forced fabric replacement bumps versions."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi.testclient import TestClient

from tests.support.receiver import Receiver


def _wait(client: TestClient, name: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{name}").json()
        if job["status"] == status:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {name} did not become {status}: {job}")


def _single_port_fabric_and_job(client: TestClient) -> None:
    r = client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2,
                                                   "hosts_per_leaf": 2, "ports_per_nic": 1})
    assert r.status_code == 201
    ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(4)]
    r = client.post("/v1/jobs", json={"name": "j", "ranks": ranks,
                                      "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3]}]})
    assert r.status_code == 202


def test_a_job_cut_off_by_a_link_fails_visibly_and_returns(client: TestClient) -> None:
    _single_port_fabric_and_job(client)
    planned = _wait(client, "j", "planned")
    with Receiver() as rx:
        client.post("/v1/webhooks", json={"url": rx.url, "events": ["job.failed"], "secret": "0123456789"})
        host_link = "host3:mlx5_0:p0--leaf1:Ethernet3"
        assert client.patch(f"/v1/links/{host_link}", json={"state": "down"}).status_code == 200
        failed = _wait(client, "j", "failed")
        assert "host3" in failed["error"] or "3" in failed["error"]
        assert failed["version"] > planned["version"]
        assignments = client.get("/v1/jobs/j/assignments").json()
        assert assignments["assignments"] == [] and assignments["version"] == failed["version"]
        [(_, body)] = rx.wait_for("job.failed")
        assert json.loads(body)["data"]["job"] == "j"
    assert client.patch(f"/v1/links/{host_link}", json={"state": "up"}).status_code == 200
    back = _wait(client, "j", "planned")
    assert len(client.get("/v1/jobs/j/assignments").json()["assignments"]) == 4
    assert back["version"] > failed["version"]


def test_ranks_beyond_32_bits_are_refused(client: TestClient) -> None:
    _single_port_fabric_and_job(client)
    ranks = [{"rank": 2**31, "host": "host0", "nic": "mlx5_0"}, {"rank": 1, "host": "host1", "nic": "mlx5_0"}]
    r = client.post("/v1/jobs", json={"name": "big", "ranks": ranks,
                                      "traffic": [{"pattern": "ring", "ranks": [2**31, 1]}]})
    assert r.status_code == 422
    assert "ranks[0].rank" in [e["field"] for e in r.json()["error"]["details"]["errors"]]
    assert client.get("/v1/jobs/big").status_code == 404
    _wait(client, "j", "planned")


def test_forced_fabric_replacement_bumps_versions(client: TestClient) -> None:
    _single_port_fabric_and_job(client)
    before = _wait(client, "j", "planned")["version"]
    doc = client.get("/v1/topology").json()
    doc["name"] = "renamed"
    assert client.put("/v1/topology", json=doc, params={"force": "true"}).status_code == 200
    after = _wait(client, "j", "planned")["version"]
    assert after >= before + 2  # assignments dropped (one bump), then planned again (another)
