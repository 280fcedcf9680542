"""Link views on a real app and database: GET /v1/links, /v1/links/{name}, /v1/jobs/{name}/links.

Loads are checked against a count made here from the assignments API and the topology
document alone (API.md's demand rule), not against the service's own code."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.test_jobs_api import FABRIC, job, wait_planned


def expected_loads(client: TestClient, jobs: list[str]) -> dict[tuple[str, str], tuple[float, int]]:
    """(link, direction) -> (planned Gbit/s, flows), from the documents the API serves."""
    topo = client.get("/v1/topology").json()
    nic_gbps = {(h["name"], n["name"]): sum(p["capacity_gbps"] for p in n["ports"]) for h in topo["hosts"]
                for n in h["nics"]}
    ends = {}
    for link in client.get("/v1/links").json()["links"]:
        ends[(link["a"], link["b"])] = (link["name"], "ab")
        ends[(link["b"], link["a"])] = (link["name"], "ba")
    flows = [a for name in jobs for a in client.get(f"/v1/jobs/{name}/assignments").json()["assignments"]]
    per_nic: dict[tuple[str, str], int] = defaultdict(int)
    for a in flows:
        per_nic[(a["src_host"], a["src_nic"])] += 1
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for a in flows:
        demand = nic_gbps[(a["src_host"], a["src_nic"])] / per_nic[(a["src_host"], a["src_nic"])]
        for u, v in zip(a["path"], a["path"][1:], strict=False):
            hop = out[ends[(u, v)]]
            hop[0] += demand
            hop[1] += 1
    return {k: (v[0], int(v[1])) for k, v in out.items()}


@pytest.fixture
def two_jobs(client: TestClient) -> None:
    assert client.post("/v1/topology/generate", json=FABRIC).status_code == 201
    assert client.post("/v1/jobs", json=job("a", [0, 2, 4, 6])).status_code == 202
    assert client.post("/v1/jobs", json=job("b", [1, 3, 5, 7, 0])).status_code == 202
    wait_planned(client, "a")
    wait_planned(client, "b")


def test_links_show_planned_load_per_direction(client: TestClient, two_jobs: None) -> None:
    want = expected_loads(client, ["a", "b"])
    links = client.get("/v1/links").json()["links"]
    assert [x["name"] for x in links] == sorted(x["name"] for x in links)
    seen = 0
    for link in links:
        for d in ("ab", "ba"):
            got = link["load"][d]
            gbps, flows = want.get((link["name"], d), (0.0, 0))
            assert got["flows"] == flows, (link["name"], d)
            assert got["planned_gbps"] == pytest.approx(gbps)
            assert got["planned_utilization"] == pytest.approx(gbps / link["capacity_gbps"])
            seen += flows
        assert link["max_planned_utilization"] == max(link["load"][d]["planned_utilization"] for d in ("ab", "ba"))
    assert seen == sum(f for _, f in want.values()) > 0
    fabric_only = client.get("/v1/links", params={"kind": "fabric"}).json()["links"]
    assert fabric_only and not any(x["host_link"] for x in fabric_only)
    assert len(client.get("/v1/links", params={"kind": "host"}).json()["links"]) == len(links) - len(fabric_only)


def test_one_link_splits_its_load_by_job(client: TestClient, two_jobs: None) -> None:
    busiest = max(client.get("/v1/links", params={"kind": "fabric"}).json()["links"],
                  key=lambda x: x["load"]["ab"]["flows"] + x["load"]["ba"]["flows"])
    one = client.get(f"/v1/links/{busiest['name']}").json()
    assert one["load"] == busiest["load"]
    for d in ("ab", "ba"):
        assert sum(j[d]["flows"] for j in one["jobs"]) == one["load"][d]["flows"]
        assert sum(j[d]["planned_gbps"] for j in one["jobs"]) == pytest.approx(one["load"][d]["planned_gbps"])
    missing = client.get("/v1/links/leaf9:Ethernet0--spine0:Ethernet9")
    assert missing.status_code == 404 and missing.json()["error"]["details"]["link"].startswith("leaf9")


def test_job_links_match_its_plan_summary(client: TestClient, two_jobs: None) -> None:
    for name in ("a", "b"):
        # b shares a's host0 NIC, so a's demand, and its summary, change once b is planned: the
        # planner refreshes that summary 0.25-1.25 s later (README, link re-plans); wait for it.
        deadline = time.monotonic() + 15
        while True:
            body: dict[str, Any] = client.get(f"/v1/jobs/{name}/links").json()
            rows = body["links"]
            plan = client.get(f"/v1/jobs/{name}").json()["plan"]
            if rows and rows[0]["planned_utilization"] == pytest.approx(plan["max_link_utilization"]):
                break
            assert time.monotonic() < deadline, (name, rows[:1], plan)
            time.sleep(0.1)
        assert body["version"] >= 1 and rows
        assert [r["planned_utilization"] for r in rows] == sorted((r["planned_utilization"] for r in rows), reverse=True)
        assert sum(r["job_flows"] for r in rows if r["host_link"] and r["from"].startswith("host")) == plan["flows"]
    assert client.get("/v1/jobs/nojob/links").status_code == 404


def test_a_link_taken_down_carries_nothing(client: TestClient, two_jobs: None) -> None:
    used = next(x for x in client.get("/v1/links", params={"kind": "fabric"}).json()["links"]
                if x["load"]["ab"]["flows"] or x["load"]["ba"]["flows"])
    assert client.patch(f"/v1/links/{used['name']}", json={"state": "down"}).status_code == 200
    after = client.get(f"/v1/links/{used['name']}").json()
    assert after["state"] == "down" and after["load"]["ab"]["flows"] == after["load"]["ba"]["flows"] == 0
    assert [x["name"] for x in client.get("/v1/links", params={"state": "down"}).json()["links"]] == [used["name"]]
    want = expected_loads(client, ["a", "b"])
    for link in client.get("/v1/links").json()["links"]:
        assert link["load"]["ab"]["flows"] == want.get((link["name"], "ab"), (0.0, 0))[1]
