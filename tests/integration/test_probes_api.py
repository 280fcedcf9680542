"""Probed hashing mode end to end: the controller asks for probes, agents report hops, the job
is planned only on ports a probe saw take each path."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient

from controller.domain.fabric import ROCE_SPORT_MIN
from controller.topology.document import to_document
from controller.topology.generate import LeafSpineSpec, leaf_spine
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path

FABRIC = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=1))


def probed_document() -> dict[str, Any]:
    doc = to_document(FABRIC)
    doc["hashing"] = {"mode": "probed", "protocol": "udp", "dst_port": 4791}
    return doc


def agent_probe(view: FabricView, src: str, dst: str, count: int = 64) -> dict[str, Any]:
    """What a node agent would report: per source port, the switches' addresses hop by hop."""
    src_node, dst_node = view.ports_by_address[src].node, view.ports_by_address[dst].node
    results = []
    for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + count):
        path = ref_v1_path(view, src_node, dst_node, sport)
        assert path is not None
        results.append({"sport": sport, "hops": [view.switches[s].mgmt_address for s in path[1:-1]] + [dst]})
    return {"src_address": src, "dst_address": dst, "protocol": "udp", "dst_port": 4791, "results": results}


def test_probe_requests_then_plan_on_probed_ports(client: TestClient) -> None:
    assert client.put("/v1/topology", json=probed_document()).status_code == 200
    job = {"name": "p", "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(4)],
           "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3], "channels": 1, "qps_per_connection": 2}]}
    assert client.post("/v1/jobs", json=job).status_code == 202
    time.sleep(0.3)
    assert client.get("/v1/jobs/p").json()["status"] == "pending"
    wanted = client.get("/v1/probes/requests", params={"host": "host0"}).json()["requests"]
    assert wanted and all(r["protocol"] == "udp" and r["dst_port"] == 4791 for r in wanted)
    view = FabricView(FABRIC)
    every = client.get("/v1/probes/requests").json()["requests"]
    for r in every:
        got = client.post("/v1/probes", json=agent_probe(view, r["src_address"], r["dst_address"]))
        assert got.status_code == 202 and got.json()["learned"] == 64
    assert client.get("/v1/probes/requests").json()["requests"] == []
    deadline = time.monotonic() + 20
    while client.get("/v1/jobs/p").json()["status"] != "planned" and time.monotonic() < deadline:
        time.sleep(0.05)
    body = client.get("/v1/jobs/p/assignments").json()
    assert len(body["assignments"]) == 8
    for a in body["assignments"]:
        src = f"{a['src_host']}:{a['src_nic']}:{a['src_port']}"
        dst = f"{a['dst_host']}:{a['dst_nic']}:{a['dst_port']}"
        assert ref_v1_path(view, src, dst, a["udp_sport"]) == tuple(a["path"])
        assert ROCE_SPORT_MIN <= a["udp_sport"] < ROCE_SPORT_MIN + 64


def test_unknown_hops_are_kept_but_not_learned(client: TestClient) -> None:
    assert client.put("/v1/topology", json=probed_document()).status_code == 200
    body = {"src_address": "10.0.0.2", "dst_address": "10.0.0.6", "results": [{"sport": 50000, "hops": ["192.0.2.99"]}]}
    got = client.post("/v1/probes", json=body)
    assert got.status_code == 202 and got.json() == {"accepted": 1, "learned": 0}
    assert client.post("/v1/probes", json={**body, "bogus": 1}).status_code == 422
