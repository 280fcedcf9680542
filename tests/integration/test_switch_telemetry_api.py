"""`POST /v1/telemetry/switches`: raw counters in, validated against the fabric, rates out."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.services.clock import now_us
from tests.unit.topology.fabrics import tiny_document

# Recent: samples older than the retention are pruned by the leader's worker meanwhile.
T0 = now_us() - 60_000_000


def _sample(t_us: int, tx_bytes: int, ecn: int, **port: Any) -> dict[str, Any]:
    return {"switch": "leaf0", "t_us": t_us, "ports": [
        {"port": "Ethernet0", "tx_bytes": tx_bytes, "rx_bytes": 456, "ecn_marked_pkts": ecn,
         "pfc_rx_pause": {"3": 0}, "pfc_tx_pause": {"3": 0}, **port}]}


@pytest.fixture
def fabric(client: TestClient, token_for) -> dict[str, str]:  # type: ignore[no-untyped-def]
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    headers: dict[str, str] = token_for("agent")
    return headers


def test_rates_follow_counters_across_a_wrap(client: TestClient, fabric: dict[str, str]) -> None:
    r = client.post("/v1/telemetry/switches", json={"samples": [_sample(T0, 2**64 - 1000, 10)]}, headers=fabric)
    assert r.status_code == 202 and r.json() == {"accepted": 1}
    client.post("/v1/telemetry/switches", json={"samples": [_sample(T0 + 2_000_000, 3000, 30)]}, headers=fabric)
    [port] = client.get("/v1/telemetry/switches", params={"switch": "leaf0"}).json()["ports"]
    assert port["rates_per_s"]["tx_bytes"] == 2000.0  # (1000 + 3000) bytes over 2 s, across the wrap
    assert port["rates_per_s"]["ecn_marked_pkts"] == 10.0
    assert port["rates_per_s"]["pfc_rx_pause.3"] == 0.0
    # A late sample changes nothing.
    client.post("/v1/telemetry/switches", json={"samples": [_sample(T0 + 1_000_000, 1, 1)]}, headers=fabric)
    assert client.get("/v1/telemetry/switches").json()["ports"][0]["t_us"] == T0 + 2_000_000


@pytest.mark.parametrize(("sample", "field"), [
    ({"switch": "leaf9", "t_us": T0, "ports": []}, "samples[0].switch"),
    (_sample(T0, 1, 1, port="Ethernet77"), "samples[0].ports[0].port"),
    (_sample(T0, -1, 1), "samples[0].ports[0].tx_bytes"),
    (_sample(T0, 1, 1, pfc_rx_pause={"9": 1}), "samples[0].ports[0].pfc_rx_pause.9.[key]"),
    (_sample(T0, 1, 1, colour=1), "samples[0].ports[0].colour"),
])
def test_bad_samples_are_refused_whole(client: TestClient, fabric: dict[str, str], sample: dict[str, Any],
                                       field: str) -> None:
    r = client.post("/v1/telemetry/switches", json={"samples": [_sample(T0, 5, 5), sample]}, headers=fabric)
    assert r.status_code == 422, r.text
    fields = [e["field"].replace("samples[1]", "samples[0]") for e in r.json()["error"]["details"]["errors"]]
    assert any(f.startswith(field.split(".[key]")[0]) for f in fields), fields
    assert client.get("/v1/telemetry/switches").json()["ports"] == []


def test_a_port_reported_not_up_reports_its_link_down_while_fresh(client: TestClient, fabric: dict[str, str]) -> None:
    """ifOperStatus per port (FORMAT.md): kept with the port's latest sample, forgotten by a sample
    that omits it (a state counts only while fresh), and the link of a port not up in a fresh
    sample is reported down (C4D's input)."""
    switches = client.app.state.switch_telemetry  # type: ignore[attr-defined]
    link = next(lk["name"] for lk in client.get("/v1/links").json()["links"]
                if ("leaf0", "Ethernet0") in ((lk["a"], lk["a_port"]), (lk["b"], lk["b_port"])))
    t = now_us()
    post = lambda doc: client.post("/v1/telemetry/switches", json={"samples": [doc]}, headers=fabric)  # noqa: E731
    assert post(_sample(t - 3_000_000, 1, 1, oper_status="up")).status_code == 202
    assert switches.links_reported_down(now_us()) == {}
    assert post(_sample(t - 2_000_000, 2, 1, oper_status="lowerLayerDown")).status_code == 202
    [port] = client.get("/v1/telemetry/switches").json()["ports"]
    assert port["oper_status"] == "lowerLayerDown" and port["counters"]["tx_bytes"] == 2
    assert switches.links_reported_down(now_us()) == {link: "leaf0:Ethernet0 ifOperStatus lowerLayerDown"}
    # stale (older than C4_LINK_SAMPLE_FRESH_S): no longer evidence
    assert switches.links_reported_down(now_us() + 31_000_000) == {}
    # a later sample without ifOperStatus (a partial walk): the old "down" is not carried on
    assert post(_sample(t - 1_000_000, 3, 1)).status_code == 202
    [port] = client.get("/v1/telemetry/switches").json()["ports"]
    assert port["oper_status"] is None and port["counters"]["tx_bytes"] == 3
    assert switches.links_reported_down(now_us()) == {}
    assert post(_sample(t - 500_000, 4, 1, oper_status="lowerLayerDown")).status_code == 202
    assert switches.links_reported_down(now_us()) == {link: "leaf0:Ethernet0 ifOperStatus lowerLayerDown"}
    assert post(_sample(t, 5, 1, oper_status="up")).status_code == 202
    assert switches.links_reported_down(now_us()) == {}
    # an operator's state counts too
    assert client.patch(f"/v1/links/{link}", json={"state": "down"}).status_code == 200
    assert switches.links_reported_down(now_us()) == {link: "state down"}
    bad = post(_sample(t + 1, 6, 1, oper_status="sideways"))
    assert bad.status_code == 422
    assert any(e["field"] == "samples[0].ports[0].oper_status" for e in bad.json()["error"]["details"]["errors"])
