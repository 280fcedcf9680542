"""Webhooks a receiver can trust (a signature over a timestamp, an event id, a subscription's
events in causal order even through retries) and the event log (one line per event, only
once committed, text or JSON, never a secret); on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging
import time

import pytest
from fastapi.testclient import TestClient

from controller.domain.alarms import Alarm, AlarmEvent, AlarmKind, Suspect, SuspectKind
from controller.services import alarms, eventlog, webhooks
from controller.services.clock import iso8601, now_us
from controller.services.events import emit
from controller.services.runtime import Runtime
from controller.store.db import transaction
from controller.store.tables import JobRow
from tests.support.receiver import Receiver
from tests.unit.topology.fabrics import tiny_document

SECRET = "s3cret-s3cret"


def _train_job(runtime: Runtime) -> None:
    spec = {"name": "train", "ranks": [{"rank": 0, "host": "host0", "nic": "mlx5_0"},
                                       {"rank": 1, "host": "host1", "nic": "mlx5_0"}]}
    with transaction(runtime.sessions) as s:
        s.add(JobRow(name="train", spec=spec, status="planned", version=1, created_at_us=now_us(),
                     updated_at_us=now_us()))


def _open_alarm(runtime: Runtime, key: str = "hook-1") -> None:
    alarm = Alarm(key, AlarmKind.COMM_SLOW, "train", "0x1", 9, (Suspect(SuspectKind.NIC_PORT, "host1:mlx5_0:p0"),),
                  {"summary": "connection 0->1 at 20% of its peers' median"}, now_us())
    alarms.record(runtime, [AlarmEvent("opened", alarm, now_us())])


def test_a_subscription_gets_its_events_in_causal_order_through_retries(client: TestClient,
                                                                         runtime: Runtime) -> None:
    """alarm.opened -> host.isolated -> job.restart_requested, emitted in one transaction; the
    receiver refuses the first attempt, so alarm.opened is retried after a backoff: the later
    events wait for it instead of overtaking it."""
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    _train_job(runtime)
    with Receiver(fail_first=1) as rx:
        client.post("/v1/webhooks", json={"url": rx.url, "secret": SECRET, "events": [
            "alarm.opened", "host.isolated", "job.restart_requested"]}).raise_for_status()
        _open_alarm(runtime)
        rx.wait_for("job.restart_requested")
        order = [e["event"] for e in rx.events()]
    assert order == ["alarm.opened", "alarm.opened", "host.isolated", "job.restart_requested"], order


def test_deliveries_carry_a_replay_proof_signature_and_an_event_id(client: TestClient, runtime: Runtime) -> None:
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    with Receiver(fail_first=1) as rx:
        client.post("/v1/webhooks", json={"url": rx.url, "secret": SECRET, "events": ["host.isolated"]}).raise_for_status()
        client.post("/v1/hosts/host0/isolate", json={"reason": "ECC"}).raise_for_status()
        (h1, b1), (h2, b2) = rx.wait_for("host.isolated", count=2)
    body = json.loads(b2)
    assert b1 == b2 and h1["x-c4-event-id"] == h2["x-c4-event-id"] == body["id"]  # a retry: same event, same id
    assert body["id"].startswith("ev-") and body["at"] == iso8601(body["at_us"])
    assert h2["x-c4-signature"] == webhooks.signature(SECRET, b2)  # API.md's header, unchanged
    t = int(h2["x-c4-timestamp"])
    assert abs(t - time.time()) < 60 and h2["x-c4-signature-v1"].startswith(f"t={t},v1=")
    assert webhooks.verify(SECRET, b2, h2, now_s=time.time()) is None
    assert webhooks.verify(SECRET, b2, h2, now_s=t + 301) == f"timestamp {t} is more than 300 s from now"
    assert webhooks.verify(SECRET, b2.replace(b"ECC", b"EEC"), h2, now_s=time.time()) == "signature mismatch"
    assert webhooks.verify("another-secret", b2, h2, now_s=time.time()) == "signature mismatch"
    forged = {**h2, "X-C4-Signature-V1": h2["x-c4-signature-v1"].replace(f"t={t}", f"t={t + 100}")}
    assert webhooks.verify(SECRET, b2, {k: v for k, v in forged.items() if k != "x-c4-signature-v1"},
                           now_s=t + 100) == "signature mismatch"


def test_one_log_line_per_event_only_once_committed(client: TestClient, runtime: Runtime,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    _train_job(runtime)
    caplog.set_level(logging.INFO, logger=eventlog.EVENTS_LOGGER)
    with pytest.raises(RuntimeError), transaction(runtime.sessions) as s:
        emit(s, "host.released", {"host": "host0"}, now_us())
        raise RuntimeError("rolled back")
    _open_alarm(runtime)
    lines = [(r.c4_event, r.c4_fields) for r in caplog.records if hasattr(r, "c4_event")]  # type: ignore[attr-defined]
    assert [e for e, _ in lines] == ["alarm.opened", "host.isolated", "job.restart_requested"]
    opened = lines[0][1]
    assert opened["kind"] == "comm_slow" and opened["first_suspect"] == "nic_port:host1:mlx5_0:p0"
    assert opened["summary"] == "connection 0->1 at 20% of its peers' median" and opened["job"] == "train"
    first = next(r for r in caplog.records if hasattr(r, "c4_event"))
    text = eventlog.TextFormatter().format(first)
    assert " INFO  alarm.opened alarm=a-000001 job=train kind=comm_slow first_suspect=nic_port:host1:mlx5_0:p0 " in text
    doc = json.loads(eventlog.JsonFormatter().format(first))
    assert doc["event"] == "alarm.opened" and doc["level"] == "info" and doc["time"].endswith("Z")


def test_a_given_up_delivery_is_logged_without_secrets(client: TestClient, runtime: Runtime,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    assert client.put("/v1/topology", json=tiny_document()).status_code == 200
    caplog.set_level(logging.INFO)
    with Receiver(fail_first=100) as rx:
        url = rx.url + "?token=qwerty"  # (a user or password in the URL is refused at registration)
        client.post("/v1/webhooks", json={"url": url, "secret": SECRET, "events": ["host.isolated"]}).raise_for_status()
        client.post("/v1/hosts/host0/isolate", json={"reason": "ECC"}).raise_for_status()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(getattr(r, "c4_event", "") == "webhook.given_up"
                                                      for r in caplog.records):
            time.sleep(0.1)
    [given_up] = [r for r in caplog.records if getattr(r, "c4_event", "") == "webhook.given_up"]
    assert given_up.levelno == logging.WARNING and given_up.c4_fields["attempts"] == 4  # type: ignore[attr-defined]
    assert given_up.c4_fields["url"] == rx.url  # type: ignore[attr-defined]
    for formatter in (eventlog.TextFormatter(), eventlog.JsonFormatter()):
        out = "\n".join(formatter.format(r) for r in caplog.records)
        for secret in (SECRET, "qwerty", "test-admin-token"):
            assert secret not in out, (secret, formatter)
