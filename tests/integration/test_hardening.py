"""Issue 17 on the real HTTP stack: limits before work, integers and names refused by field,
roles exactly as API.md gives them, webhook destinations, and the fabric corner cases.

Each test names the risk of docs/SECURITY.md it proves.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from controller.api.schemas.jobs import MAX_JOB_FLOWS
from controller.api.schemas.telemetry import MAX_BATCH_PEERS
from controller.services.runtime import Runtime
from tests.support.live import live_controller
from tests.unit.topology.fabrics import tiny_document

TWO_TO_THE_63 = 2**63


def _fields(r: Any) -> list[str]:
    return [e["field"] for e in r.json()["error"]["details"].get("errors", [])]


def _fabric(client: TestClient) -> None:
    r = client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2,
                                                   "hosts_per_leaf": 2})
    assert r.status_code == 201, r.text


# --- limits before work ----------------------------------------------------------------------


def _raw(port: int, head: bytes, body: bytes = b"", read_s: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=read_s) as s:
        s.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Any]:
    with live_controller(tmp_path) as controller:
        yield controller


def test_an_unauthenticated_upload_is_refused_before_its_body_is_read(live: Any) -> None:
    """Risk: unbounded work before trust. 60 MB declared (under the 64 MiB cap), 16 bytes
    sent: 401 at once; 500 MB declared: refused at once too (413, past any route's limit)."""
    port = int(live.url.rsplit(":", 1)[1])
    start = time.monotonic()
    for length, status in ((60_000_000, b"401"), (500_000_000, b"413")):
        head = (b"PUT /v1/topology HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % length)
        answer = _raw(port, head, b'{"name": "x", "s')
        assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
        assert b"connection: close" in answer.lower()
    assert time.monotonic() - start < 5
    chunked = (b"POST /v1/telemetry/collectives HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Authorization: Bearer not-a-token\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert _raw(port, chunked, b"10\r\n" + b"x" * 16 + b"\r\n").startswith(b"HTTP/1.1 401")


def test_each_route_has_its_own_body_limit_named_in_the_413(live: Any) -> None:
    """Risk: unbounded work before trust. Declared or streamed, past the route's limit is 413."""
    r = live.http.post("/v1/webhooks", content=b"{" + b" " * 70_000 + b"}",
                       headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["details"]["max_body_bytes"] == 64 << 10
    assert str(64 << 10) in r.json()["error"]["message"]

    def stream() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(80):
            yield b"y" * 65536  # 5 MiB, past POST /v1/jobs' 4 MiB, sent without a length
        yield b'"}'

    r = live.http.post("/v1/jobs", content=stream(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["details"]["max_body_bytes"] == 4 << 20
    openapi = live.http.get("/openapi.json").json()
    assert openapi["paths"]["/v1/jobs"]["post"]["x-c4-max-body-bytes"] == 4 << 20
    assert openapi["paths"]["/v1/topology"]["put"]["x-c4-max-body-bytes"] == "C4_MAX_BODY_BYTES"


def test_a_full_gate_answers_429_with_retry_after(client: TestClient) -> None:
    """Risk: one heavy request stalls everyone; overlapping ones exhaust memory."""
    gate = client.app.state.gates["fabric"]  # type: ignore[attr-defined]
    assert gate.try_enter(0)  # a fabric change in progress
    try:
        r = client.put("/v1/topology", json=tiny_document())
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert r.json()["error"]["code"] == "too_many_requests"
        assert client.get("/healthz").status_code == 200
    finally:
        gate.leave(0)
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200


def test_bodies_that_are_not_utf8_json_are_a_422_naming_the_body(client: TestClient) -> None:
    """Was an undocumented 400. Heavy and light routes alike."""
    for path in ("/v1/topology", "/v1/webhooks"):
        method = client.put if path == "/v1/topology" else client.post
        for raw in (b'\xff\xfe{"name"}', b'{"name": "x",}', b"[1, 2"):
            r = method(path, content=raw, headers={"Content-Type": "application/json"})
            assert r.status_code == 422, (path, raw, r.text)
            assert _fields(r) == ["body"]


def test_a_heavy_body_names_the_element_that_breaks_a_rule(client: TestClient) -> None:
    doc = tiny_document()
    doc["hosts"][1]["nics"][0]["ports"][0]["capacity_gbps"] = -1
    r = client.put("/v1/topology", json=doc)
    assert r.status_code == 422 and "hosts[1].nics[0].ports[0].capacity_gbps" in _fields(r)


def test_generation_is_bounded_by_links_before_any_work(client: TestClient, runtime: Runtime) -> None:
    """Risk: generation at the schema's maximum ran 230 s and took 6.6 GB."""
    start = time.monotonic()
    r = client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 128, "spines": 1024,
                                                   "hosts_per_leaf": 512, "nics_per_host": 16})
    assert r.status_code == 422 and _fields(r) == ["hosts_per_leaf"]
    assert "C4_MAX_FABRIC_LINKS" in r.json()["error"]["message"]
    r = client.post("/v1/topology/generate", json={"kind": "clos3", "pods": 256, "leaves_per_pod": 2,
                                                   "spines_per_pod": 256, "cores": 1024, "hosts_per_leaf": 1})
    assert r.status_code == 422 and _fields(r) in (["cores"], ["switches"])
    assert time.monotonic() - start < 5


def test_telemetry_batches_are_bounded_in_total_peers(client: TestClient) -> None:
    _fabric(client)
    peer = {"peer": 1, "dir": "send", "bytes": 1, "t_first_us": 1, "t_last_us": 2, "done": True}
    record = {"job": "j", "comm": "c", "rank": 0, "nranks": 2, "op": "AllReduce", "seq": 0, "bytes": 1,
              "t_start_us": 1, "t_end_us": 2, "peers": [peer] * 4096}
    r = client.post("/v1/telemetry/collectives", json={"host": "host0", "records": [record] * 5})
    assert r.status_code == 422, r.text[:300]
    assert str(MAX_BATCH_PEERS) in r.json()["error"]["message"]


def test_a_job_is_bounded_in_flows(client: TestClient) -> None:
    _fabric(client)
    ranks = [{"rank": i, "host": f"host{i % 4}", "nic": "mlx5_0"} for i in range(64)]
    r = client.post("/v1/jobs", json={"name": "big", "ranks": ranks,
                                      "traffic": [{"pattern": "alltoall", "channels": 1024, "qps_per_connection": 1}]})
    assert r.status_code == 422 and str(MAX_JOB_FLOWS) in r.json()["error"]["message"]


# --- integers and names ----------------------------------------------------------------------


def test_integers_beyond_storage_are_a_422_naming_the_field(client: TestClient) -> None:
    """Were 500s: SQLite and PostgreSQL cannot hold them."""
    _fabric(client)
    for method, path, field in (("DELETE", "/v1/webhooks/99999999999999999999", "path.webhook_id"),
                                ("GET", f"/v1/webhooks/{TWO_TO_THE_63}/deliveries", "path.webhook_id"),
                                ("POST", f"/v1/tokens/{2**31}/revoke", "path.token_id"),
                                ("GET", f"/v1/jobs/x/assignments?after_version={TWO_TO_THE_63}", "query.after_version")):
        r = client.request(method, path)
        assert r.status_code == 422 and _fields(r) == [field], (path, r.text)
    r = client.post("/v1/probes", json={"src_address": "10.0.0.2", "dst_address": "10.0.0.6", "results": [],
                                        "t_us": TWO_TO_THE_63})
    assert r.status_code == 422 and _fields(r) == ["t_us"]
    for where, value in (("pod", 2**70), ("ecmp_seed", TWO_TO_THE_63)):
        doc = tiny_document()
        doc["switches"][0][where] = value
        r = client.put("/v1/topology", json=doc)
        assert r.status_code == 422 and _fields(r) == [f"switches[0].{where}"], r.text
    doc = tiny_document()
    doc["hosts"][0]["nics"][0]["rail"] = 2**70
    r = client.put("/v1/topology", json=doc)
    assert r.status_code == 422 and _fields(r) == ["hosts[0].nics[0].rail"]
    assert client.get("/v1/alarms/a-99999999999999999999").status_code == 404
    r = client.post("/v1/probes", json={"src_address": "10.0.0.2", "dst_address": "10.0.0.6", "results": [],
                                        "t_us": True})
    assert r.status_code == 422 and _fields(r) == ["t_us"]  # JSON types are not coerced


HOSTILE = ["job\x00", "job\x1b[2J", "a\u202eexe", "zero\u200bwidth", "..", ".", "x" * 101, "tab\there"]


@pytest.mark.parametrize("bad", HOSTILE)
def test_one_name_rule_in_bodies_and_paths(client: TestClient, bad: str) -> None:
    _fabric(client)
    job = {"name": bad, "ranks": [{"rank": 0, "host": "host0", "nic": "mlx5_0"},
                                  {"rank": 1, "host": "host1", "nic": "mlx5_0"}],
           "traffic": [{"pattern": "ring", "ranks": [0, 1]}]}
    r = client.post("/v1/jobs", json=job)
    assert r.status_code == 422 and _fields(r) == ["name"], r.text
    doc = tiny_document()
    doc["hosts"][0]["name"] = bad
    r = client.put("/v1/topology", json=doc)
    assert r.status_code == 422 and "hosts[0].name" in _fields(r)
    if bad not in (".", ".."):  # a client normalises those segments away before sending
        r = client.get(f"/v1/jobs/{quote(bad)}")
        assert r.status_code == 422 and _fields(r) == ["path.name"], r.text


def test_a_get_topology_document_is_accepted_back(client: TestClient) -> None:
    """Canonical link names (up to 397 characters) fit the rule for link names."""
    doc = tiny_document()
    doc["hosts"][0]["name"] = "h" * 100
    doc["hosts"][0]["nics"][0]["name"] = "n" * 64
    doc["hosts"][0]["nics"][0]["ports"][0]["name"] = "p" * 64
    assert client.put("/v1/topology", json=doc).status_code == 200, doc
    got = client.get("/v1/topology").json()
    assert max(len(link["name"]) for link in got["links"] + [p for h in got["hosts"] for n in h["nics"]
                                                                  for p in n["ports"]] if "name" in link) <= 400
    again = {k: got[k] for k in ("name", "hashing", "switches", "links", "hosts")}
    r = client.put("/v1/topology", json=again)
    assert r.status_code == 200, r.text[:500]


# --- roles (API.md) --------------------------------------------------------------------------

# (method, path, roles that may) besides admin, who may everything; "any" = every role.
ROLES: list[tuple[str, str, set[str] | str]] = [
    ("GET", "/v1/topology", "any"), ("PUT", "/v1/topology", set()), ("POST", "/v1/topology/generate", set()),
    ("GET", "/v1/links", "any"), ("PATCH", "/v1/links/x", set()),
    ("POST", "/v1/jobs", {"scheduler"}), ("GET", "/v1/jobs", "any"), ("GET", "/v1/jobs/x", "any"),
    ("DELETE", "/v1/jobs/x", {"scheduler"}), ("GET", "/v1/jobs/x/assignments", {"scheduler", "agent"}),
    ("POST", "/v1/probes", {"agent"}), ("GET", "/v1/probes/requests", {"agent"}),
    ("POST", "/v1/telemetry/collectives", {"agent"}), ("POST", "/v1/telemetry/switches", {"agent"}),
    ("GET", "/v1/alarms", "any"), ("POST", "/v1/alarms/a-000001/acknowledge", {"scheduler"}),
    ("POST", "/v1/alarms/a-000001/resolve", {"scheduler"}),
    ("GET", "/v1/hosts", "any"), ("POST", "/v1/hosts/host0/isolate", {"scheduler"}),
    ("POST", "/v1/hosts/host0/release", {"scheduler"}),
    ("POST", "/v1/webhooks", {"scheduler"}), ("GET", "/v1/webhooks", "any"), ("DELETE", "/v1/webhooks/1", {"scheduler"}),
    ("GET", "/v1/tokens", set()), ("POST", "/v1/tokens/1/revoke", set()),
]


def test_roles_are_exactly_as_api_md_says(client: TestClient, token_for: Any) -> None:
    """Viewers may GET, except assignments and probe requests (scheduler, agent; agent)."""
    _fabric(client)
    tokens = {role: token_for(role) for role in ("viewer", "agent", "scheduler")}
    for method, path, allowed in ROLES:
        for role, headers in tokens.items():
            r = client.request(method, path, headers=headers, json={} if method in ("POST", "PUT", "PATCH") else None)
            may = allowed == "any" or role in allowed
            assert (r.status_code != 403) == may, (role, method, path, r.status_code, r.text[:200])
            assert r.status_code != 401
        r = client.request(method, path, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401


# --- webhooks --------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/",
                                 "http://10.0.0.1/hook", "http://2130706433/v1/topology", "http://[::1]:8000/",
                                 "http://user:pw@8.8.8.8/", "ftp://8.8.8.8/"])
def test_webhook_registration_refuses_internal_destinations(tmp_path: Path, url: str) -> None:
    """Risk: SSRF. With no allow-list (the default), every one of these is a 422 on `url`."""
    with live_controller(tmp_path, webhook_allow_networks="") as live:
        r = live.http.post("/v1/webhooks", json={"url": url, "events": ["host.isolated"], "secret": "s" * 8})
        assert r.status_code == 422 and _fields(r) == ["url"], r.text
        localhost = live.url.replace("127.0.0.1", "localhost") + "/v1/topology"  # its own API
        r = live.http.post("/v1/webhooks", json={"url": localhost, "events": ["host.isolated"], "secret": "s" * 8})
        assert r.status_code == 422


def test_webhook_urls_are_whole_for_admin_only(client: TestClient, token_for: Any) -> None:
    r = client.post("/v1/webhooks", json={"url": "https://8.8.8.8/hook?token=qwerty", "events": ["host.isolated"],
                                          "secret": "s" * 8})
    assert r.status_code == 201, r.text
    assert client.get("/v1/webhooks").json()["webhooks"][0]["url"] == "https://8.8.8.8/hook?token=qwerty"
    for role in ("viewer", "scheduler", "agent"):
        seen = client.get("/v1/webhooks", headers=token_for(role)).json()["webhooks"][0]["url"]
        assert seen == "https://8.8.8.8/hook", role


def test_delivery_checks_the_resolved_address_again(client: TestClient, runtime: Runtime,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Risk: DNS rebinding. Public at registration, loopback at delivery: never sent."""
    import ipaddress

    from controller.services import destinations
    from tests.support.receiver import Receiver

    _fabric(client)
    answer = [ipaddress.ip_address("8.8.8.8")]
    monkeypatch.setattr(destinations, "resolve", lambda host, port: list(answer))
    monkeypatch.setattr(runtime.settings, "webhook_allow_networks", "")
    with Receiver() as rx:
        port = rx.url.rsplit(":", 1)[1].split("/", 1)[0]
        r = client.post("/v1/webhooks", json={"url": f"http://rebind.example:{port}/h", "events": ["host.isolated"],
                                              "secret": "s" * 8})
        assert r.status_code == 201, r.text
        answer[:] = [ipaddress.ip_address("127.0.0.1")]  # the name now points inside
        client.post("/v1/hosts/host0/isolate", json={"reason": "test"}).raise_for_status()
        deadline = time.monotonic() + 15
        deliveries: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            deliveries = client.get(f"/v1/webhooks/{r.json()['id']}/deliveries").json()["deliveries"]
            if deliveries and deliveries[0]["attempts"]:
                break
            time.sleep(0.1)
        assert deliveries and "loopback" in (deliveries[0]["last_error"] or ""), deliveries
        assert rx.requests == []


# --- correctness -----------------------------------------------------------------------------


def test_a_fabric_without_links_is_accepted_never_409(client: TestClient) -> None:
    r = client.put("/v1/topology", json={"name": "lonely", "switches": [{"name": "leaf0", "role": "leaf"}]})
    assert r.status_code == 200, r.text
    assert client.get("/v1/topology").json()["links"] == []


def test_a_forced_put_that_drops_a_jobs_host_fails_the_job_naming_the_host(client: TestClient) -> None:
    _fabric(client)
    job = {"name": "j", "ranks": [{"rank": 0, "host": "host0", "nic": "mlx5_0"},
                                  {"rank": 1, "host": "host3", "nic": "mlx5_0"}],
           "traffic": [{"pattern": "ring", "ranks": [0, 1]}]}
    assert client.post("/v1/jobs", json=job).status_code == 202
    smaller = {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 1}  # host0, host1 only
    assert client.post("/v1/topology/generate?force=true", json=smaller).status_code == 201
    deadline = time.monotonic() + 30
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        doc = client.get("/v1/jobs/j").json()
        if doc["status"] == "failed":
            break
        time.sleep(0.1)
    assert doc["status"] == "failed" and "host3" in doc["error"] and "KeyError" not in doc["error"], doc


def test_a_host_dropped_between_the_steps_check_and_the_plan_fails_the_job_naming_it(
        client: TestClient, runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the test above can meet (CI, PostgreSQL, once): the planner's step checked the
    job against the fabric, then a forced PUT dropped its host before the plan read the fabric;
    the plan's KeyError must not be what the job says."""
    from tests.integration.test_bound_epoch import _planner

    _fabric(client)
    for worker in runtime.workers:
        worker.stop()
    planner = _planner(runtime)
    job = {"name": "j", "ranks": [{"rank": 0, "host": "host0", "nic": "mlx5_0"},
                                  {"rank": 1, "host": "host3", "nic": "mlx5_0"}],
           "traffic": [{"pattern": "ring", "ranks": [0, 1]}]}
    assert client.post("/v1/jobs", json=job).status_code == 202
    real = planner._batches

    def batches(names: list[str]) -> list[list[str]]:  # the PUT lands after the step's check
        smaller = {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 1}
        assert client.post("/v1/topology/generate?force=true", json=smaller).status_code == 201
        return real(names)

    monkeypatch.setattr(planner, "_batches", batches)
    planner.step()
    doc = client.get("/v1/jobs/j").json()
    assert doc["status"] == "failed" and "host3" in doc["error"] and "KeyError" not in doc["error"], doc


def test_a_405_lists_every_method_of_the_path(client: TestClient) -> None:
    r = client.request("PATCH", "/v1/jobs")
    assert r.status_code == 405 and r.headers["Allow"] == "GET, POST"


def test_the_gate_is_free_once_the_answer_has_arrived(live: Any) -> None:
    """A client that sends its next heavy request as soon as it has the previous answer finds
    the gate free (it once found it still held, 429, because the gate was left after the
    answer's last bytes had gone out)."""
    small = {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 1}
    for i in range(30):
        r = live.http.post("/v1/topology/generate", json={**small, "name": f"g{i}"})
        assert r.status_code == 201, (i, r.status_code, r.text[:200])
