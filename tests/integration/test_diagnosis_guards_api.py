"""C4D's guards over HTTP, on SQLite and PostgreSQL: `net_us` ingest, heartbeats and telemetry
gaps in /v1/hosts and /metrics, announced pauses, a job's own diagnosis settings (spec, then
alarms and isolation), and the rate matrix."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import Checkpoint, SimConfig, SimRun, simulate
from controller.domain.alarms import Alarm, AlarmEvent, AlarmKind, Suspect, SuspectKind
from controller.services import alarms
from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.store.db import transaction
from controller.store.tables import JobRow
from tests.integration.test_telemetry_api import NRANKS, _post_run, _record

PEER = {"peer": 4, "dir": "send", "bytes": 33554432, "t_first_us": 1764430000001000,
        "t_last_us": 1764430000179000, "done": True, "net_us": 120000,
        "flows": [{"sport": 49152, "bytes": 16777216, "t_last_us": 1764430000179000, "net_us": 110000},
                  {"sport": 49153, "bytes": 16777216, "t_last_us": 1764430000100000}]}


def _job_row(runtime: Runtime, name: str, diagnosis: dict[str, Any] | None = None) -> None:
    spec: dict[str, Any] = {"name": name, "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"}
                                                    for i in range(NRANKS)]}
    if diagnosis is not None:
        spec["diagnosis"] = diagnosis
    with transaction(runtime.sessions) as s:
        s.add(JobRow(name=name, spec=spec, status="planned", version=1, created_at_us=now_us(),
                     updated_at_us=now_us()))


@pytest.fixture
def train(client: TestClient, runtime: Runtime) -> TestClient:
    r = client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2,
                                                   "hosts_per_leaf": 4, "ports_per_nic": 1})
    assert r.status_code == 201
    _job_row(runtime, "train")
    return client


def test_net_us_per_peer_and_per_flow_reaches_the_detectors(train: TestClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    telemetry = train.app.state.telemetry  # type: ignore[attr-defined]
    seen: list[Any] = []
    ingest = telemetry.ingest
    monkeypatch.setattr(telemetry, "ingest", lambda host, records: (seen.extend(records), ingest(host, records))[1])
    r = train.post("/v1/telemetry/collectives", json={"host": "host3", "records": [_record(peers=[PEER])]})
    assert r.status_code == 202, r.text
    peer = seen[0].peers[0]
    assert peer.net_us == 120000 and [f.net_us for f in peer.flows] == [110000, None]
    bad = {**PEER, "flows": [{**PEER["flows"][0], "net_us": -1}]}
    r = train.post("/v1/telemetry/collectives", json={"host": "host3", "records": [_record(peers=[bad])]})
    assert r.status_code == 422
    assert "records[0].peers[0].flows[0].net_us" in [e["field"] for e in r.json()["error"]["details"]["errors"]]


def test_an_empty_batch_is_a_heartbeat_and_a_silent_host_shows_a_telemetry_gap(
        train: TestClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    telemetry = train.app.state.telemetry  # type: ignore[attr-defined]
    telemetry.worker.stop()
    clock = [now_us()]
    monkeypatch.setattr("controller.services.telemetry.now_us", lambda: clock[0])
    for host in ("host1", "host2"):
        r = train.post("/v1/telemetry/collectives", json={"host": host, "records": []})
        assert r.status_code == 202 and r.json() == {"accepted": 0}
    assert train.post("/v1/telemetry/collectives", json={"host": "ghost", "records": []}).status_code == 422
    telemetry.step()
    hosts = {h["name"]: h["telemetry"] for h in train.get("/v1/hosts").json()["hosts"]}
    assert hosts["host1"]["state"] == hosts["host2"]["state"] == "reporting"
    assert hosts["host3"] == {"state": "unknown", "last_heard_us": None, "gap_since_us": None}
    clock[0] += int((telemetry.config.telemetry_gap_s + 1) * 1e6)
    assert train.post("/v1/telemetry/collectives", json={"host": "host2", "records": []}).status_code == 202
    telemetry.step()
    gap = train.get("/v1/hosts", params={"telemetry": "gap"}).json()["hosts"]
    assert [h["name"] for h in gap] == ["host1"] and gap[0]["telemetry"]["gap_since_us"] is not None
    assert gap[0]["state"] == "active"  # silence isolates nobody
    metric = re.search(r"^c4_hosts_telemetry_gap (\S+)$", train.get("/metrics").text, re.M)
    assert metric and float(metric.group(1)) == 1.0


def test_pauses_are_announced_listed_and_ended(train: TestClient, token_for) -> None:  # type: ignore[no-untyped-def]
    agent = token_for("agent")
    r = train.post("/v1/jobs/train/pauses", json={"duration_s": 60, "reason": "checkpoint 1200"}, headers=agent)
    assert r.status_code == 201, r.text
    pause = r.json()
    assert pause["job"] == "train" and pause["until_us"] - pause["from_us"] == 60_000_000 and pause["active"]
    listed = train.get("/v1/jobs/train/pauses").json()["pauses"]
    assert [p["id"] for p in listed] == [pause["id"]] and listed[0]["active"]
    assert train.delete("/v1/jobs/train/pauses", headers=agent).status_code == 204
    assert not train.get("/v1/jobs/train/pauses").json()["pauses"][0]["active"]
    assert train.post("/v1/jobs/nope/pauses", json={"duration_s": 5}).status_code == 404
    r = train.post("/v1/jobs/train/pauses", json={"duration_s": 0})
    assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["field"] == "duration_s"
    assert train.post("/v1/jobs/train/pauses", json={"duration_s": 5}, headers=token_for("viewer")).status_code == 403


def _run_with_checkpoint() -> SimRun:
    duration_s = 20.0
    cfg = SimConfig(job="train", nranks=NRANKS, hosts_per_leaf=4, spines=2, duration_s=duration_s,
                    start_us=now_us() - int(duration_s * 1e6), skew_us=2_000_000,
                    world_bytes=32 << 20, dp_bytes=8 << 20, checkpoints=(Checkpoint(3.0, 30.0),))
    return simulate(cfg)


@pytest.mark.parametrize("announced", [True, False])
def test_an_announced_checkpoint_opens_no_hang_alarm(train: TestClient, monkeypatch, announced: bool) -> None:  # type: ignore[no-untyped-def]
    """Rank 0 checkpoints for 30 s while the others wait (hang timeout 3 s here)."""
    telemetry = train.app.state.telemetry  # type: ignore[attr-defined]
    telemetry.worker.stop()
    run = _run_with_checkpoint()
    clock = [0]
    monkeypatch.setattr("controller.services.telemetry.now_us", lambda: clock[0])
    monkeypatch.setattr("controller.services.pauses.now_us", lambda: clock[0])
    if announced:
        (pause,) = run.pauses
        clock[0] = pause.announced_us
        r = train.post("/v1/jobs/train/pauses", json={"duration_s": (pause.until_us - pause.from_us) / 1e6})
        assert r.status_code == 201
    _post_run(train, run, clock)
    telemetry.step()
    kinds = [a["kind"] for a in train.get("/v1/alarms", params={"job": "train"}).json()["alarms"]]
    assert kinds == ([] if announced else ["noncomm_hang"])


def test_a_jobs_own_settings_are_validated_kept_and_applied(client: TestClient, runtime: Runtime) -> None:
    assert client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2,
                                                      "hosts_per_leaf": 4, "ports_per_nic": 1}).status_code == 201
    body = {"name": "own", "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(4)],
            "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3]}],
            "diagnosis": {"hang_timeout_s": 120, "slow_factor": 4, "auto_isolate": False}}
    r = client.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    assert client.get("/v1/jobs/own").json()["diagnosis"] == {"hang_timeout_s": 120, "slow_factor": 4,
                                                              "auto_isolate": False}
    for change, field in (({"slow_factor": 0.5}, "diagnosis.slow_factor"),
                          ({"slow_window": 0}, "diagnosis.slow_window"),
                          ({"colour": 1}, "diagnosis.colour")):
        r = client.post("/v1/jobs", json={**body, "name": "bad", "diagnosis": change})
        assert r.status_code == 422 and field in [e["field"] for e in r.json()["error"]["details"]["errors"]]
    # its alarms do not isolate a host; another job's do
    _job_row(runtime, "default")
    for job, key in (("own", "k1"), ("default", "k2")):
        alarm = Alarm(key, AlarmKind.COMM_SLOW, job, "c", 1, (Suspect(SuspectKind.HOST, "host1" if job == "own" else "host2"),),
                      {"summary": "x"}, now_us())
        alarms.record(runtime, [AlarmEvent("opened", alarm, now_us())])
    isolated = [h["name"] for h in client.get("/v1/hosts", params={"state": "isolated"}).json()["hosts"]]
    assert isolated == ["host2"]


def test_the_rate_matrix_shows_the_slow_cells(train: TestClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    telemetry = train.app.state.telemetry  # type: ignore[attr-defined]
    telemetry.worker.stop()
    duration_s = 8.0
    run = simulate(SimConfig(job="train", nranks=NRANKS, hosts_per_leaf=4, spines=2, duration_s=duration_s,
                             start_us=now_us() - int(duration_s * 1e6), world_bytes=32 << 20, dp_bytes=8 << 20,
                             faults=(Fault("slow_nic_port", 2.0, "host5:mlx5_0:p0"),)))
    clock = [0]
    monkeypatch.setattr("controller.services.telemetry.now_us", lambda: clock[0])
    _post_run(train, run, clock)
    telemetry.step()
    comms = {c["comm"]: c for c in train.get("/v1/telemetry/jobs/train/rate-matrix").json()["comms"]}
    world = comms["world"]
    assert world["sources"] == {"flow": 10}
    cells = {(c["src"], c["dst"]): c["ratio"] for c in world["cells"]}
    assert cells[(4, 5)] < 0.3 and cells[(5, 6)] < 0.3 and cells[(1, 2)] > 0.8
    assert train.get("/v1/telemetry/jobs/nope/rate-matrix").status_code == 404
