"""The topology API on SQLite and PostgreSQL: round trips, refusals that change nothing, links."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.store.db import transaction
from controller.store.tables import JobRow
from tests.unit.topology.fabrics import tiny_document
from tests.unit.topology.test_validate import RULES, SHAPE_RULES


def _put(client: TestClient, doc: dict[str, Any], **params: Any) -> Any:
    return client.put("/v1/topology", json=doc, params=params)


def test_put_then_get_round_trips_with_canonical_names(client: TestClient) -> None:
    r = _put(client, tiny_document())
    assert r.status_code == 200, r.text
    assert r.json()["hosts"] == 2 and r.json()["host_ports"] == 4
    got = client.get("/v1/topology").json()
    assert [link["name"] for link in got["links"]][:2] == [
        "leaf0:Ethernet0--spine0:Ethernet0", "leaf0:Ethernet1--spine1:Ethernet0"]
    port = got["hosts"][0]["nics"][0]["ports"][0]
    assert port["link"] == "host0:mlx5_0:p0--leaf0:Ethernet32" and port["state"] == "up"
    assert got["switches"][0]["mgmt_address"] == "192.0.2.10"
    # What GET returns is accepted again unchanged.
    assert _put(client, got).status_code == 200
    assert client.get("/v1/topology").json() == got


@pytest.mark.parametrize(("rule", "mutate", "field"), RULES + SHAPE_RULES, ids=[r[0] for r in RULES + SHAPE_RULES])
def test_bad_fabric_is_a_422_naming_the_field_and_changes_nothing(
        client: TestClient, rule: str, mutate: Any, field: str) -> None:
    assert _put(client, tiny_document()).status_code == 200
    before = client.get("/v1/topology").json()
    doc = copy.deepcopy(before)
    for link in doc["links"]:
        link.pop("name")
    mutate(doc)
    r = _put(client, doc)
    assert r.status_code == 422, r.text
    body = r.json()["error"]
    assert body["code"] == "validation_error"
    assert field in [e["field"] for e in body["details"]["errors"]], body
    assert field in body["message"] or len(body["details"]["errors"]) > 1
    assert client.get("/v1/topology").json() == before


def test_get_before_any_topology_is_404(client: TestClient) -> None:
    r = client.get("/v1/topology")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_generate_leaf_spine_and_clos3(client: TestClient) -> None:
    r = client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 8, "spines": 4,
                                                   "hosts_per_leaf": 4, "nics_per_host": 1, "ports_per_nic": 2,
                                                   "host_gbps": 200, "fabric_gbps": 400})
    assert r.status_code == 201, r.text
    assert r.json()["switches"] == 12 and r.json()["hosts"] == 32
    r = client.post("/v1/topology/generate", json={"kind": "clos3", "pods": 2, "leaves_per_pod": 2,
                                                   "spines_per_pod": 2, "cores": 4})
    assert r.status_code == 201, r.text
    doc = client.get("/v1/topology").json()
    assert {s["role"] for s in doc["switches"]} == {"leaf", "spine", "core"}
    assert doc["name"] == "clos3"


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "leaf-spine", "leaves": 3}, "leaves"),
    ({"kind": "leaf-spine", "spines": 0}, "spines"),
    ({"kind": "clos3", "pods": 2, "cores": -1}, "cores"),
    ({"kind": "clos3", "leaves_per_pod": 3}, "leaves_per_pod"),
    ({"kind": "clos3", "pods": 256, "leaves_per_pod": 256}, "leaves_per_pod"),
    ({"kind": "torus"}, "kind"),
    ({}, "kind"),
    ({"kind": "leaf-spine", "colour": 1}, "colour"),
])
def test_bad_generate_request_is_422(client: TestClient, body: dict[str, Any], field: str) -> None:
    r = client.post("/v1/topology/generate", json=body)
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["error"]["details"]["errors"]] == [field]
    assert client.get("/v1/topology").status_code == 404


def test_port_names_with_slashes_work_in_link_urls(client: TestClient) -> None:
    doc = tiny_document()
    for link in doc["links"]:
        link["a_port"] = link["a_port"].replace("Ethernet", "Ethernet1/")
    assert _put(client, doc).status_code == 200
    name = "leaf0:Ethernet1/1--spine1:Ethernet0"
    r = client.patch(f"/v1/links/{name}", json={"state": "down"})
    assert r.status_code == 200 and r.json()["name"] == name and r.json()["state"] == "down"


@pytest.mark.parametrize("host", ["team/host0", "host:0", "host 0"])
def test_host_names_that_cannot_stand_in_a_url_or_a_port_name_are_refused(client: TestClient, host: str) -> None:
    doc = tiny_document()
    doc["hosts"][0]["name"] = host
    r = _put(client, doc)
    assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["field"] == "hosts[0].name"


def test_patch_link_changes_state_and_is_visible(client: TestClient) -> None:
    _put(client, tiny_document())
    name = "leaf0:Ethernet1--spine1:Ethernet0"
    r = client.patch(f"/v1/links/{name}", json={"state": "down"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "down" and r.json()["replanned_flows"] == 0
    links = {link["name"]: link["state"] for link in client.get("/v1/topology").json()["links"]}
    assert links[name] == "down"
    host_link = "host0:mlx5_0:p1--leaf1:Ethernet32"
    assert client.patch(f"/v1/links/{host_link}", json={"state": "drained"}).json()["state"] == "drained"
    port = client.get("/v1/topology").json()["hosts"][0]["nics"][0]["ports"][1]
    assert port["state"] == "drained"


def test_patch_unknown_link_or_bad_state(client: TestClient) -> None:
    _put(client, tiny_document())
    assert client.patch("/v1/links/nope", json={"state": "down"}).status_code == 404
    r = client.patch("/v1/links/leaf0:Ethernet1--spine1:Ethernet0", json={"state": "broken"})
    assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["field"] == "state"


def test_put_with_active_jobs_is_409_unless_forced(client: TestClient, runtime: Runtime) -> None:
    _put(client, tiny_document())
    with transaction(runtime.sessions) as s:
        s.add(JobRow(name="j", spec={}, status="planned", version=1, created_at_us=now_us(), updated_at_us=now_us()))
    doc = tiny_document()
    doc["name"] = "changed"
    r = _put(client, doc)
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"
    assert client.get("/v1/topology").json()["name"] == "tiny"
    assert _put(client, doc, force="true").status_code == 200
    assert client.get("/v1/topology").json()["name"] == "changed"
