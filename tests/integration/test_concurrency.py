"""Concurrent fabric changes serialize: no lost update, the cache agrees with the database,
and no plan computed on an older fabric is written over a newer one."""

from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient

from controller.domain.fabric import LinkState
from controller.services import topology
from controller.services.runtime import Runtime
from controller.store import fabric_repo
from tests.unit.topology.fabrics import tiny_document

LINKS = ["leaf0:Ethernet0--spine0:Ethernet0", "leaf0:Ethernet1--spine1:Ethernet0", "leaf1:Ethernet2--spine2:Ethernet1"]


def test_concurrent_link_changes_lose_nothing(client: TestClient, runtime: Runtime) -> None:
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    with runtime.sessions() as s:
        before = fabric_repo.revision(s)
    assert before is not None
    barrier = threading.Barrier(len(LINKS))
    errors: list[BaseException] = []

    def down(name: str) -> None:
        barrier.wait()
        try:
            topology.set_link_state(runtime, name, LinkState.DOWN)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=down, args=(n,)) for n in LINKS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with runtime.sessions() as s:
        loaded = fabric_repo.load_fabric(s)
    assert loaded is not None
    stored, revision = loaded
    assert revision == before + len(LINKS)
    assert {link.name for link in stored.links if link.state == LinkState.DOWN} == set(LINKS)
    served = {link["name"]: link["state"] for link in client.get("/v1/topology").json()["links"]}
    assert all(served[n] == "down" for n in LINKS)


def test_no_flow_stays_on_a_link_taken_down_while_planning(client: TestClient) -> None:
    r = client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 4, "spines": 4,
                                                   "hosts_per_leaf": 4, "ports_per_nic": 1})
    assert r.status_code == 201
    ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(16)]
    traffic = [{"pattern": "alltoall", "channels": 1, "qps_per_connection": 2}]
    assert client.post("/v1/jobs", json={"name": "j", "ranks": ranks, "traffic": traffic}).status_code == 202
    links = [f"leaf{leaf}:Ethernet{spine}--spine{spine}:Ethernet{leaf}" for leaf in range(2) for spine in range(2)]
    for name in links:  # race the background planner
        assert client.patch(f"/v1/links/{name}", json={"state": "down"}).status_code == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job = client.get("/v1/jobs/j").json()
        if job["status"] == "planned":
            break
        time.sleep(0.1)
    assert job["status"] == "planned", job
    used = {link for a in client.get("/v1/jobs/j/assignments").json()["assignments"] for link in a["links"]}
    assert used.isdisjoint(links)
