"""Auth roles, the error format, health, readiness, metrics and the OpenAPI schema."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.unit.topology.fabrics import tiny_document


def test_no_token_is_401_with_the_error_format(client: TestClient) -> None:
    r = client.get("/v1/topology", headers={"Authorization": ""})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized" and r.json()["error"]["message"]
    assert client.get("/v1/topology", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_roles(client: TestClient, token_for) -> None:  # type: ignore[no-untyped-def]
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    for role in ("viewer", "agent", "scheduler"):
        headers = token_for(role)
        assert client.get("/v1/topology", headers=headers).status_code == 200, role
        r = client.put("/v1/topology", json=tiny_document(), headers=headers)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", role
        r = client.patch("/v1/links/leaf0:Ethernet1--spine1:Ethernet0", json={"state": "down"}, headers=headers)
        assert r.status_code == 403, role
    admin = token_for("admin")
    assert client.patch("/v1/links/leaf0:Ethernet1--spine1:Ethernet0", json={"state": "down"},
                        headers=admin).status_code == 200


def test_health_ready_metrics_openapi(client: TestClient) -> None:
    assert client.get("/healthz", headers={}).json()["status"] == "ok"
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"]["migrations"] == "ok"
    client.get("/v1/topology")
    text = client.get("/metrics").text
    assert 'c4_http_requests_total{method="GET",route="/v1/topology",status="404"}' in text
    assert "c4_database_up 1.0" in text
    schema = client.get("/openapi.json").json()
    for path in ("/v1/topology", "/v1/topology/generate", "/v1/links/{name}", "/readyz"):
        assert path in schema["paths"]


def test_unknown_route_uses_the_error_format(client: TestClient) -> None:
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
