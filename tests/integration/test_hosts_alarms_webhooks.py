"""Hosts, alarms and webhooks against a real HTTP receiver, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.domain.alarms import Alarm, AlarmEvent, AlarmKind, Suspect, SuspectKind
from controller.services import alarms
from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.store.db import transaction
from controller.store.tables import JobRow
from tests.support.receiver import Receiver
from tests.unit.topology.fabrics import tiny_document

SECRET = "s3cret-s3cret"
ALL_EVENTS = ["alarm.opened", "alarm.resolved", "host.isolated", "host.released", "job.restart_requested"]


def _signed(headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-c4-signature"], expected)


def _job(runtime: Runtime, name: str, hosts: list[str], status: str = "planned") -> None:
    spec = {"name": name, "ranks": [{"rank": i, "host": h, "nic": "mlx5_0"} for i, h in enumerate(hosts)]}
    with transaction(runtime.sessions) as s:
        s.add(JobRow(name=name, spec=spec, status=status, version=1, created_at_us=now_us(), updated_at_us=now_us()))


def _alarm_event(key: str, suspect: Suspect, event: str = "opened") -> AlarmEvent:
    alarm = Alarm(incident_key=key, kind=AlarmKind.COMM_SLOW, job="train", comm="0x1", seq=7,
                  suspects=(suspect,), evidence={"summary": "rank 1 at 20% of the median", "ratio": 0.2},
                  opened_at_us=now_us())
    return AlarmEvent(event, alarm, now_us())  # type: ignore[arg-type]


@pytest.fixture
def fabric(client: TestClient) -> TestClient:
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    return client


def test_isolate_and_release_flag_jobs(fabric: TestClient, runtime: Runtime) -> None:
    client = fabric
    _job(runtime, "train", ["host0", "host1"])
    _job(runtime, "other", ["host1"])
    assert [h["state"] for h in client.get("/v1/hosts").json()["hosts"]] == ["active", "active"]
    r = client.post("/v1/hosts/host0/isolate", json={"reason": "ECC errors"})
    assert r.status_code == 200 and r.json()["state"] == "isolated" and r.json()["reason"] == "ECC errors"
    assert [h["name"] for h in client.get("/v1/hosts", params={"state": "isolated"}).json()["hosts"]] == ["host0"]
    with runtime.sessions() as s:
        flags = {j.name: j.flagged for j in s.query(JobRow)}
    assert flags == {"train": True, "other": False}
    assert client.post("/v1/hosts/host0/release").json()["state"] == "active"
    with runtime.sessions() as s:
        assert not any(j.flagged for j in s.query(JobRow))


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/v1/hosts/nope/isolate", {"reason": "x"}, 404),
    ("/v1/hosts/host0/isolate", {}, 422),
    ("/v1/hosts/host0/isolate", {"reason": "x", "extra": 1}, 422),
    ("/v1/hosts/nope/release", None, 404),
    ("/v1/hosts/host0/release", {"zzz": 1}, 422),
])
def test_bad_host_requests(fabric: TestClient, path: str, body: Any, status: int) -> None:
    r = fabric.post(path, json=body)
    assert r.status_code == status and "error" in r.json()
    assert all(h["state"] == "active" for h in fabric.get("/v1/hosts").json()["hosts"])


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "http://x/h", "events": ["host.exploded"], "secret": SECRET}, "events[0]"),
    ({"url": "not a url", "events": ["host.isolated"], "secret": SECRET}, "url"),
    ({"url": "http://x/h", "events": ["host.isolated"], "secret": "short"}, "secret"),
    ({"url": "http://x/h", "events": [], "secret": SECRET}, "events"),
])
def test_bad_webhooks_are_refused(client: TestClient, body: dict[str, Any], field: str) -> None:
    r = client.post("/v1/webhooks", json=body)
    assert r.status_code == 422
    assert field in [e["field"] for e in r.json()["error"]["details"]["errors"]]
    assert client.get("/v1/webhooks").json() == {"webhooks": []}


def test_webhook_crud_hides_the_secret(client: TestClient, token_for) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/h", "events": ["host.isolated"], "secret": SECRET})
    assert r.status_code == 201 and "secret" not in r.json()
    hooks = client.get("/v1/webhooks").json()["webhooks"]
    assert len(hooks) == 1 and "secret" not in hooks[0]
    assert client.get("/v1/webhooks", headers=token_for("viewer")).json()["webhooks"][0]["url"] == hooks[0]["url"]
    r = client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/h", "events": ["host.isolated"], "secret": SECRET},
                    headers=token_for("viewer"))
    assert r.status_code == 403
    assert client.delete(f"/v1/webhooks/{hooks[0]['id']}").status_code == 204
    assert client.delete(f"/v1/webhooks/{hooks[0]['id']}").status_code == 404


def test_isolation_is_delivered_signed(fabric: TestClient, runtime: Runtime) -> None:
    with Receiver() as rx:
        fabric.post("/v1/webhooks", json={"url": rx.url, "events": ALL_EVENTS, "secret": SECRET})
        fabric.post("/v1/hosts/host1/isolate", json={"reason": "link flaps"})
        fabric.post("/v1/hosts/host1/isolate", json={"reason": "again"})  # idempotent: no second event
        [(headers, body)] = rx.wait_for("host.isolated")
        assert _signed(headers, body)
        payload = json.loads(body)
        assert payload["data"]["host"] == "host1" and payload["at_us"] > 0
        time.sleep(0.5)
        assert len([e for e in rx.events() if e["event"] == "host.isolated"]) == 1


def test_failed_deliveries_are_retried_with_backoff(fabric: TestClient) -> None:
    with Receiver(fail_first=2) as rx:
        hook = fabric.post("/v1/webhooks", json={"url": rx.url, "events": ["host.isolated"], "secret": SECRET}).json()
        fabric.post("/v1/hosts/host0/isolate", json={"reason": "x"})
        hits = rx.wait_for("host.isolated", count=3)
        assert all(_signed(h, b) for h, b in hits)
        assert hits[0][1] == hits[2][1]  # the same delivery, re-sent
        # The receiver records a request before it answers, and the worker writes the delivery's
        # outcome after it reads the answer: wait for the write, not for the third request.
        deadline = time.monotonic() + 10
        while True:
            deliveries = fabric.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["deliveries"]
            if deliveries[0]["delivered_at_us"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert deliveries[0]["attempts"] == 3 and deliveries[0]["delivered_at_us"], deliveries


def test_pending_deliveries_survive_a_controller_restart(runtime: Runtime) -> None:
    with TestClient(create_app(runtime=runtime, start_workers=False),
                    headers={"Authorization": "Bearer test-admin-token"}) as first:
        first.put("/v1/topology", json=tiny_document())
        with Receiver() as rx:
            url = rx.url
        # The receiver is gone and the first controller sends nothing (its workers are off).
        first.post("/v1/webhooks", json={"url": url, "events": ["host.isolated"], "secret": SECRET})
        first.post("/v1/hosts/host0/isolate", json={"reason": "x"})
    restarted = Runtime.from_settings(runtime.settings)
    with Receiver() as rx, TestClient(create_app(runtime=restarted)) as second:
        # Point the stored subscription at the new receiver's port; the queued delivery is kept.
        with transaction(restarted.sessions) as s:
            from controller.store.tables import WebhookRow
            s.query(WebhookRow).update({"url": rx.url})
        [(headers, body)] = rx.wait_for("host.isolated")
        assert _signed(headers, body) and json.loads(body)["data"]["host"] == "host0"
        assert second.get("/healthz").status_code == 200
    restarted.engine.dispose()


def test_an_alarm_opens_once_isolates_and_requests_a_restart(fabric: TestClient, runtime: Runtime) -> None:
    _job(runtime, "train", ["host0", "host1"])
    with Receiver() as rx:
        fabric.post("/v1/webhooks", json={"url": rx.url, "events": ALL_EVENTS, "secret": SECRET})
        event = _alarm_event("train/comm_slow/nic:host1:mlx5_0:p1", Suspect(SuspectKind.NIC_PORT, "host1:mlx5_0:p1"))
        first = alarms.record(runtime, [event])
        again = alarms.record(runtime, [event, event])
        assert len(first) == 1 and again == []
        listed = fabric.get("/v1/alarms", params={"job": "train"}).json()["alarms"]
        assert [a["id"] for a in listed] == first
        alarm = fabric.get(f"/v1/alarms/{first[0]}").json()
        assert alarm["kind"] == "comm_slow" and alarm["suspects"] == [{"kind": "nic_port", "name": "host1:mlx5_0:p1"}]
        assert alarm["evidence"]["summary"]
        assert fabric.get("/v1/hosts", params={"state": "isolated"}).json()["hosts"][0]["name"] == "host1"
        [(h, body)] = rx.wait_for("job.restart_requested")
        data = json.loads(body)["data"]
        assert data == {"job": "train", "isolated_hosts": ["host1"], "alarm": first[0],
                        "reason": "rank 1 at 20% of the median"} and _signed(h, body)
        rx.wait_for("alarm.opened")


def test_alarm_acknowledge_and_resolve(fabric: TestClient, runtime: Runtime, token_for) -> None:  # type: ignore[no-untyped-def]
    [alarm_id] = alarms.record(runtime, [_alarm_event("k1", Suspect(SuspectKind.LINK, "leaf0:Ethernet0--spine0:Ethernet0"))])
    assert fabric.get("/v1/hosts", params={"state": "isolated"}).json()["hosts"] == []  # a link is not a host
    assert fabric.post(f"/v1/alarms/{alarm_id}/acknowledge", headers=token_for("viewer")).status_code == 403
    assert fabric.post(f"/v1/alarms/{alarm_id}/acknowledge", json={"note": "x"}).status_code == 422
    assert fabric.post(f"/v1/alarms/{alarm_id}/acknowledge").json()["state"] == "acknowledged"
    resolved = fabric.post(f"/v1/alarms/{alarm_id}/resolve").json()
    assert resolved["state"] == "resolved" and resolved["resolved_by"] == "operator"
    assert fabric.post(f"/v1/alarms/{alarm_id}/acknowledge").status_code == 409
    assert fabric.get("/v1/alarms", params={"state": "open"}).json()["alarms"] == []
    assert fabric.get("/v1/alarms/a-999999").status_code == 404
    assert fabric.get("/v1/alarms/17").status_code == 404
    assert fabric.get("/v1/alarms", params={"state": "weird"}).status_code == 422
    # The detector resolving an incident that is already resolved changes nothing;
    # the same incident later opens a new alarm.
    alarms.record(runtime, [_alarm_event("k1", Suspect(SuspectKind.LINK, "x"), "resolved")])
    [second] = alarms.record(runtime, [_alarm_event("k1", Suspect(SuspectKind.LINK, "x"))])
    assert second != alarm_id
