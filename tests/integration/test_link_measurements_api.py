"""Measured link load end to end on a real app and database: switch counters posted with
`POST /v1/telemetry/switches` → `measured` in `GET /v1/links`, `/v1/links/{name}/series`,
`GET /v1/congestion` and `/metrics`.

Counters grow at rates chosen here, so every expected figure is arithmetic on those rates,
not a replay of the service's code."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.settings import Settings
from tests.conftest import ADMIN_TOKEN
from tests.unit.topology.fabrics import tiny_document

SPINE_LINK = "leaf0:Ethernet0--spine0:Ethernet0"
HOST_LINK = "host0:mlx5_0:p0--leaf0:Ethernet32"
STEP_S = 10


def port(name: str, t_s: float, tx_bps: float = 0.0, rx_bps: float = 0.0, pkts: float = 0.0,
         marked: float = 0.0, pfc_rx: float = 0.0, pfc_tx: float = 0.0) -> dict[str, Any]:
    """Counters of a port that has moved `tx_bps`/`rx_bps` bytes/s etc. for `t_s` seconds."""
    return {"port": name, "tx_bytes": int(tx_bps * t_s), "rx_bytes": int(rx_bps * t_s),
            "tx_pkts": int(pkts * t_s), "rx_pkts": int(pkts * t_s), "ecn_marked_pkts": int(marked * pkts * t_s),
            "pfc_rx_pause": {"3": int(pfc_rx * t_s)}, "pfc_tx_pause": {"3": int(pfc_tx * t_s)}}


def post(client: TestClient, samples: list[dict[str, Any]], **params: str) -> dict[str, Any]:
    r = client.post("/v1/telemetry/switches", json={"samples": samples}, params=params)
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    return body


def link(client: TestClient, name: str) -> dict[str, Any]:
    r = client.get(f"/v1/links/{name}")
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


@pytest.fixture
def fabric(client: TestClient) -> int:
    """The tiny fabric stored; returns a start time (µs) for three polls 10 s apart ending now."""
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    return now_us() - 2 * STEP_S * 1_000_000


def feed(client: TestClient, polls: int, marked: float = 0.0) -> int:
    """leaf0 and spine0 polled `polls` times, 10 s apart, the last one now: 25 GB/s leaf0 ->
    spine0 with `marked` of its 2 M packets/s ECN-marked and 40 PFC pauses/s received by leaf0,
    5 GB/s back; leaf0 -> host0 at 10 GB/s and host0 -> leaf0 at 2.5 GB/s with 7 pauses/s sent
    by leaf0. Returns the first poll's time."""
    t0 = now_us() - (polls - 1) * STEP_S * 1_000_000
    for i in range(polls):
        t_s = i * STEP_S
        t_us = t0 + t_s * 1_000_000
        post(client, [
            {"switch": "leaf0", "t_us": t_us, "counter_epoch": "e1", "ports": [
                port("Ethernet0", t_s, tx_bps=25e9, rx_bps=5e9, pkts=2e6, marked=marked, pfc_rx=40),
                port("Ethernet32", t_s, tx_bps=10e9, rx_bps=2.5e9, pkts=1e6, pfc_tx=7)]},
            {"switch": "spine0", "t_us": t_us + 1000, "counter_epoch": "s1", "ports": [
                port("Ethernet0", t_s, tx_bps=5e9, rx_bps=25e9, pkts=4e5)]},
        ])
    return t0


def test_links_show_measured_rates_per_direction(client: TestClient, fabric: int) -> None:
    t0 = feed(client, 4)
    doc = link(client, SPINE_LINK)
    ab, ba = doc["measured"]["ab"], doc["measured"]["ba"]
    # leaf0 is `a`: its tx is `ab`; the rates are constant, so the EWMA equals them.
    assert ab["bytes_per_s"] == pytest.approx(25e9)
    assert ab["utilization"] == pytest.approx(25e9 * 8 / 400e9)
    assert ab["ecn_marks_per_s"] == 0 and ab["ecn_marked_fraction"] == 0
    assert ab["pfc_pauses_per_s"] == {"3": pytest.approx(40)}
    assert ab["congested"] is False and ab["source"] == "leaf0:Ethernet0"
    assert ab["t_us"] == t0 + 3 * STEP_S * 1_000_000
    # `ba` is measured at its transmitter, spine0.
    assert ba["bytes_per_s"] == pytest.approx(5e9) and ba["source"] == "spine0:Ethernet0"
    # A host link: only the switch end is polled; switch -> host (`ba`) from its tx, host ->
    # switch (`ab`) from its rx, with the pauses leaf0 sent.
    host = link(client, HOST_LINK)["measured"]
    assert host["ba"]["bytes_per_s"] == pytest.approx(10e9)
    assert host["ab"]["bytes_per_s"] == pytest.approx(2.5e9)
    assert host["ab"]["pfc_pauses_per_s"] == {"3": pytest.approx(7)}
    assert host["ab"]["ecn_marks_per_s"] is None
    # Unsampled links are null; the list endpoint carries the same as the one-link view.
    listed = {x["name"]: x for x in client.get("/v1/links").json()["links"]}
    assert listed["leaf1:Ethernet0--spine0:Ethernet1"]["measured"] == {"ab": None, "ba": None}
    assert listed[SPINE_LINK]["measured"] == doc["measured"]


def test_ecn_marks_make_a_direction_congested_and_the_series_shows_it(client: TestClient, fabric: int) -> None:
    t0 = feed(client, 7, marked=0.2)
    ab = link(client, SPINE_LINK)["measured"]["ab"]
    assert ab["congested"] is True
    assert ab["since_us"] == t0 + 2 * STEP_S * 1_000_000  # second hot sample (the first has no rate)
    assert "ECN marks" in ab["reason"]
    assert ab["ecn_marked_fraction"] == pytest.approx(0.2, rel=1e-3)
    [c] = client.get("/v1/congestion").json()["congested"]
    assert (c["link"], c["direction"], c["since_us"]) == (SPINE_LINK, "ab", ab["since_us"])
    assert c["measured_gbps"] == pytest.approx(200.0) and c["planned_gbps"] == 0
    assert c["background_gbps"] == pytest.approx(200.0)  # no planned flows: all of it is background

    series = client.get(f"/v1/links/{SPINE_LINK}/series", params={"window_s": 600}).json()
    assert series["link"] == SPINE_LINK
    assert [m["t_us"] for m in series["ab"]] == [t0 + i * STEP_S * 1_000_000 for i in range(1, 7)]
    assert [m["congested"] for m in series["ab"]] == [False, True, True, True, True, True]
    assert all(m["raw"]["bytes_per_s"] == pytest.approx(25e9) and m["interval_s"] == STEP_S for m in series["ab"])
    assert [m["source"] for m in series["ba"]] == ["spine0:Ethernet0"] * 6
    short = client.get(f"/v1/links/{SPINE_LINK}/series", params={"window_s": 25}).json()
    assert len(short["ab"]) == 3  # now, now - 10 s, now - 20 s
    capped = client.get(f"/v1/links/{SPINE_LINK}/series", params={"window_s": 10**9}).json()
    assert capped["window_s"] == capped["retention_s"]
    assert client.get("/v1/links/nope--nope/series").status_code == 404
    assert client.get(f"/v1/links/{SPINE_LINK}/series", params={"window_s": 0}).status_code == 422


def test_a_new_counter_epoch_gives_no_rate_for_the_interval(client: TestClient, fabric: int) -> None:
    t1 = fabric + STEP_S * 1_000_000
    post(client, [{"switch": "leaf0", "t_us": fabric, "counter_epoch": "a", "ports": [port("Ethernet0", 100, 1e9)]}])
    # The switch restarted: its counters are small again, and the agent says so.
    post(client, [{"switch": "leaf0", "t_us": t1, "counter_epoch": "b", "ports": [port("Ethernet0", 5, 1e9)]}])
    assert client.get(f"/v1/links/{SPINE_LINK}/series").json()["ab"] == []
    post(client, [{"switch": "leaf0", "t_us": t1 + 10_000_000, "counter_epoch": "b",
                   "ports": [port("Ethernet0", 15, 1e9)]}])
    [m] = client.get(f"/v1/links/{SPINE_LINK}/series").json()["ab"]
    assert m["bytes_per_s"] == pytest.approx(1e9)


def test_the_receiver_stands_in_while_the_transmitter_is_silent(client: TestClient, fabric: int) -> None:
    for i in range(3):
        post(client, [{"switch": "leaf0", "t_us": fabric + i * 10_000_000, "ports": [
            port("Ethernet0", i * 10, tx_bps=1e9, rx_bps=3e9, pfc_tx=5)]}])
    ba = link(client, SPINE_LINK)["measured"]["ba"]  # spine0 never reported
    assert ba["bytes_per_s"] == pytest.approx(3e9) and ba["source"] == "leaf0:Ethernet0"
    assert ba["pfc_pauses_per_s"] == {"3": pytest.approx(5)} and ba["ecn_marks_per_s"] is None


def test_unknown_ports_are_ignored_on_request_and_listed(client: TestClient, fabric: int) -> None:
    body = post(client, [
        {"switch": "leaf0", "t_us": fabric, "ports": [port("Ethernet0", 1, 1e9), port("eth0", 1, 1e9)]},
        {"switch": "leaf9", "t_us": fabric, "ports": []},
    ], unknown="ignore")
    assert body["accepted"] == 1
    assert [i["field"] for i in body["ignored"]] == ["samples[0].ports[1].port", "samples[1].switch"]
    assert [p["port"] for p in client.get("/v1/telemetry/switches").json()["ports"]] == ["Ethernet0"]


def test_stale_samples_show_no_measurement(client: TestClient) -> None:
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    old = now_us() - 600 * 1_000_000
    for i in range(3):
        post(client, [{"switch": "leaf0", "t_us": old + i * 10_000_000, "ports": [port("Ethernet0", i * 10, 1e9)]}])
    assert link(client, SPINE_LINK)["measured"]["ab"] is None
    assert len(client.get(f"/v1/links/{SPINE_LINK}/series", params={"window_s": 900}).json()["ab"]) == 2


def _gauges(text: str, name: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^{name}\{{(.*)\}} (\S+)$", text, re.M)}


def test_metrics_carry_per_direction_gauges(client: TestClient, fabric: int) -> None:
    feed(client, 4, marked=0.1)
    text = client.get("/metrics").text
    util = _gauges(text, "c4_link_measured_utilization")
    assert util[f'direction="ab",link="{SPINE_LINK}"'] == pytest.approx(0.5)
    pfc = _gauges(text, "c4_link_pfc_pauses_per_second")
    assert pfc[f'direction="ab",link="{SPINE_LINK}",priority="3"'] == pytest.approx(40)
    ecn = _gauges(text, "c4_link_ecn_marks_per_second")
    assert ecn[f'direction="ab",link="{SPINE_LINK}"'] == pytest.approx(2e5)
    assert len(util) == 4  # two directions of the spine link, two of the host link


@pytest.fixture
def capped_client(runtime: Runtime, settings: Settings) -> Iterator[TestClient]:
    rt = Runtime.from_settings(settings.model_copy(update={"link_metrics_max_series": 1}))
    with TestClient(create_app(runtime=rt, start_workers=False),
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        yield c
    rt.engine.dispose()


def test_metrics_label_cardinality_is_capped(client: TestClient, fabric: int, capped_client: TestClient) -> None:
    feed(client, 3)
    text = capped_client.get("/metrics").text
    util = _gauges(text, "c4_link_measured_utilization")
    assert list(util) == [f'direction="ab",link="{SPINE_LINK}"']  # the most utilized direction
    assert "c4_link_measured_directions_omitted 3.0" in text


def test_every_process_answers_the_same(client: TestClient, fabric: int, capped_client: TestClient) -> None:
    """Ingest on one process (the leader here), read on another that runs no workers."""
    t0 = feed(client, 3)
    assert link(capped_client, SPINE_LINK)["measured"] == link(client, SPINE_LINK)["measured"]
    post(capped_client, [{"switch": "leaf0", "t_us": t0 + 30 * 1_000_000, "counter_epoch": "e1", "ports": [
        port("Ethernet0", 30, tx_bps=25e9, rx_bps=5e9, pkts=2e6, pfc_rx=40)]}])
    series = client.get(f"/v1/links/{SPINE_LINK}/series").json()["ab"]
    assert len(series) == 3 and series[-1]["source"] == "leaf0:Ethernet0"


@pytest.fixture
def quiet_client(runtime: Runtime) -> Iterator[TestClient]:
    """A client whose app runs no background workers (the leader's worker would prune first)."""
    with TestClient(create_app(runtime=runtime, start_workers=False),
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        yield c


def test_the_leader_prunes_past_the_retention(quiet_client: TestClient) -> None:
    client = quiet_client
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    old = now_us() - 4000 * 1_000_000
    for i in range(3):
        post(client, [{"switch": "leaf0", "t_us": old + i * 10_000_000, "ports": [port("Ethernet0", i * 10, 1e9)]}])
    switches = client.app.state.switch_telemetry  # type: ignore[attr-defined]
    samples, states, ports = switches.prune(now_us())
    assert (samples, states, ports) == (4, 2, 1)  # both directions (spine0 is silent); retention 1800 s
    assert client.get("/v1/telemetry/switches").json()["ports"] == []


def test_the_leader_ends_congestion_whose_samples_stopped(quiet_client: TestClient, runtime: Runtime) -> None:
    from controller.store import link_telemetry_repo

    client = quiet_client
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    t0 = now_us() - 200 * 1_000_000  # congested 170 s ago, then silent
    for i in range(4):
        post(client, [{"switch": "leaf0", "t_us": t0 + i * 10_000_000, "ports": [
            port("Ethernet0", i * 10, tx_bps=1e9, pkts=1e6, marked=0.3)]}])

    def congested() -> bool:
        with runtime.sessions() as s:
            return bool(link_telemetry_repo.direction_states(s)[(SPINE_LINK, "ab")]["congested"])

    assert congested()
    client.app.state.switch_telemetry.step()  # type: ignore[attr-defined]
    assert not congested()
    [m] = client.get(f"/v1/links/{SPINE_LINK}/series", params={"window_s": 900}).json()["ab"][-1:]
    assert m["congested"] is True  # the history keeps what the detector said then
