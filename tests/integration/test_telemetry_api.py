"""Telemetry ingest over HTTP: strict batch validation, then simulated faults end to end
(ingest -> detector worker -> alarm -> isolation), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import SimConfig, SimRun, simulate
from controller.domain import coll_packed
from controller.domain.telemetry import CollectiveRecord, FlowProgress
from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.store.db import transaction
from controller.store.tables import JobRow
from node_agent import packed

NRANKS = 8


def _record(**overrides: Any) -> dict[str, Any]:
    record = {"job": "train", "comm": "0x7f3a9c01", "rank": 3, "nranks": NRANKS, "op": "AllReduce", "seq": 1042,
              "bytes": 268435456, "t_start_us": 1764430000000000, "t_end_us": 1764430000180000,
              "peers": [{"peer": 4, "dir": "send", "bytes": 33554432, "t_first_us": 1764430000001000,
                         "t_last_us": 1764430000179000, "done": True}]}
    record.update(overrides)
    return record


@pytest.fixture
def job(client: TestClient, runtime: Runtime) -> TestClient:
    r = client.post("/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2,
                                                   "hosts_per_leaf": 4, "ports_per_nic": 1})
    assert r.status_code == 201
    spec = {"name": "train", "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(NRANKS)]}
    with transaction(runtime.sessions) as s:
        s.add(JobRow(name="train", spec=spec, status="planned", version=1, created_at_us=now_us(),
                     updated_at_us=now_us()))
    return client


def test_a_valid_batch_is_accepted(job: TestClient, token_for) -> None:  # type: ignore[no-untyped-def]
    body = {"host": "host3", "records": [_record(), _record(seq=1043, t_end_us=None)]}
    r = job.post("/v1/telemetry/collectives", json=body, headers=token_for("agent"))
    assert r.status_code == 202 and r.json() == {"accepted": 2}
    assert job.post("/v1/telemetry/collectives", json=body, headers=token_for("viewer")).status_code == 403


FLOWS = [{"sport": 49152, "bytes": 16777216, "t_last_us": 1764430000179000},
         {"sport": 49153, "bytes": 16777216, "t_last_us": None}]


def test_per_flow_progress_is_accepted_and_reaches_the_detectors(job: TestClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    telemetry = job.app.state.telemetry  # type: ignore[attr-defined]
    seen: list[CollectiveRecord] = []
    feed = telemetry._feed  # what the detectors get, after the queue or the inbox
    monkeypatch.setattr(telemetry, "_feed", lambda arrival, host, records: (seen.extend(records), feed(arrival, host, records))[1])
    peer = {**_record()["peers"][0], "flows": FLOWS}
    r = job.post("/v1/telemetry/collectives", json={"host": "host3", "records": [_record(peers=[peer])]})
    assert r.status_code == 202 and r.json() == {"accepted": 1}, r.text
    telemetry.step()
    assert [type(r) for r in seen] == [CollectiveRecord] and seen[0].host == "host3"
    assert seen[0].peers[0].flows == (FlowProgress(49152, 16777216, 1764430000179000), FlowProgress(49153, 16777216, None))


def _peer_with_flows(flows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"peer": 4, "dir": "send", "bytes": 1, "t_first_us": 1, "t_last_us": 2, "done": True, "flows": flows}


BAD = [
    ("unknown job", {"job": "nope"}, "records[1].job"),
    ("rank not in the job", {"rank": 8}, "records[1].rank"),
    ("peer not in the job", {"peers": [{"peer": 99, "dir": "send", "bytes": 1, "t_first_us": 1, "t_last_us": 2,
                                        "done": True}]}, "records[1].peers[0].peer"),
    ("negative bytes", {"bytes": -1}, "records[1].bytes"),
    ("reversed times", {"t_end_us": 1764429999000000}, "records[1]"),
    ("fractional time", {"t_start_us": 1.5}, "records[1].t_start_us"),
    ("peer is itself", {"peers": [{"peer": 3, "dir": "send", "bytes": 1, "t_first_us": 1, "t_last_us": 2,
                                   "done": True}]}, "records[1]"),
    ("peer reversed times", {"peers": [{"peer": 4, "dir": "recv", "bytes": 1, "t_first_us": 5, "t_last_us": 2,
                                        "done": True}]}, "records[1].peers[0]"),
    ("unknown field", {"colour": "red"}, "records[1].colour"),
    ("communicator larger than the job", {"nranks": 64, "rank": 3}, "records[1].nranks"),
    ("negative flow bytes", {"peers": [_peer_with_flows([FLOWS[0], {**FLOWS[1], "bytes": -1}])]},
     "records[1].peers[0].flows[1].bytes"),
    ("flow port out of range", {"peers": [_peer_with_flows([{**FLOWS[0], "sport": 70000}])]},
     "records[1].peers[0].flows[0].sport"),
    ("two flows on one port", {"peers": [_peer_with_flows([FLOWS[0], FLOWS[0]])]}, "records[1].peers[0]"),
    ("too many flows", {"peers": [_peer_with_flows([{**FLOWS[0], "sport": 1000 + i} for i in range(65)])]},
     "records[1].peers[0].flows"),
]


@pytest.mark.parametrize(("case", "change", "field"), BAD, ids=[b[0] for b in BAD])
def test_one_bad_record_refuses_the_whole_batch(job: TestClient, case: str, change: dict[str, Any], field: str) -> None:
    telemetry = job.app.state.telemetry  # type: ignore[attr-defined]
    before = telemetry.diagnoser.record_count() + len(telemetry._queue)
    r = job.post("/v1/telemetry/collectives", json={"host": "host3", "records": [_record(), _record(**change)]})
    assert r.status_code == 422, r.text
    fields = [e["field"] for e in r.json()["error"]["details"]["errors"]]
    assert field in fields, fields
    assert telemetry.diagnoser.record_count() + len(telemetry._queue) == before


def test_nan_unknown_host_and_huge_batches_are_refused(job: TestClient) -> None:
    raw = json.dumps({"host": "host3", "records": [_record()]}).replace("268435456", "NaN")
    r = job.post("/v1/telemetry/collectives", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    r = job.post("/v1/telemetry/collectives", json={"host": "ghost", "records": [_record()]})
    assert r.status_code == 422 and r.json()["error"]["details"]["errors"][0]["field"] == "host"
    r = job.post("/v1/telemetry/collectives", json={"host": "host3", "records": [_record(seq=i) for i in range(10_001)]})
    assert r.status_code == 422 and "records" in r.json()["error"]["message"]


PACKED = {"Content-Type": coll_packed.CONTENT_TYPE}


def _packed(records: list[dict[str, Any]], host: str = "host3") -> bytes:
    return packed.body(host, [packed.entry(r) for r in records])


def _damaged(cut: int = 0, byte: tuple[int, int] | None = None, **change: Any) -> bytes:
    body = bytearray(_packed([_record(), _record(**{"seq": 1043, **change})]))
    if byte is not None:
        body[byte[0]] = byte[1]
    return bytes(body[:len(body) - cut])


BAD_PACKED = [
    ("not packed", lambda: b'{"host": "host3", "records": []}', "magic"),
    ("version", lambda: _damaged(byte=(4, 2)), "version"),
    ("cut short", lambda: _damaged(cut=5), "records[1]"),
    ("shape out of range", lambda: _damaged(byte=(len(_damaged()) - 118, 9)), "records[1].shape"),
    ("peer is the rank", lambda: _damaged(rank=4), "header.shapes[1]"),
    ("unknown job", lambda: _damaged(job="nope"), "records[1].job"),
    ("no start", lambda: _damaged(t_start_us=0), "records[1].t_start_us"),
    ("seq out of range", lambda: _damaged(seq=2**62), "records[1].seq"),
]


def test_a_packed_batch_gives_the_detectors_what_its_json_gives_or_is_refused_whole(job: TestClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    telemetry = job.app.state.telemetry  # type: ignore[attr-defined]
    seen: list[CollectiveRecord] = []
    feed = telemetry._feed
    monkeypatch.setattr(telemetry, "_feed", lambda arrival, host, records: (seen.extend(records), feed(arrival, host, records))[1])
    peers = [{**_record()["peers"][0], "net_us": 170000, "flows": [{**FLOWS[0], "net_us": 9}, FLOWS[1]]},
             {"peer": 2, "dir": "recv", "bytes": 0, "t_first_us": None, "t_last_us": None, "done": False}]
    records = [_record(), _record(seq=1043, t_end_us=None, op="Other"), _record(seq=1044, comm="0x1", nranks=3, peers=peers),
               _record(seq=1045, rank=5, peers=[])]
    for body, headers in ((json.dumps({"host": "host3", "records": records}).encode(), {"Content-Type": "application/json"}),
                          (_packed(records), PACKED)):
        r = job.post("/v1/telemetry/collectives", content=body, headers=headers)
        assert r.status_code == 202 and r.json() == {"accepted": 4}, r.text
        telemetry.step()
    assert len(seen) == 8 and seen[:4] == seen[4:]
    assert job.get("/openapi.json").json()["paths"]["/v1/telemetry/collectives"]["post"]["requestBody"]["content"].keys() \
        == {"application/json", coll_packed.CONTENT_TYPE}
    # a bad packed batch is refused whole, naming the field (one test: the fixture is most of the time)
    before = telemetry.diagnoser.record_count() + len(telemetry._queue)
    for case, bad, field in BAD_PACKED:
        r = job.post("/v1/telemetry/collectives", content=bad(), headers=PACKED)
        assert r.status_code == 422, (case, r.text)
        fields = [e["field"] for e in r.json()["error"]["details"]["errors"]]
        assert field in fields, (case, fields)
    telemetry.step()
    assert telemetry.diagnoser.record_count() + len(telemetry._queue) == before and len(seen) == 8
    r = job.post("/v1/telemetry/collectives", content=_packed([_record()]), headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and coll_packed.CONTENT_TYPE in r.json()["error"]["message"]


def _record_json(rec: CollectiveRecord) -> dict[str, Any]:
    return {"job": rec.job, "comm": rec.comm, "rank": rec.rank, "nranks": rec.nranks, "op": rec.op, "seq": rec.seq,
            "bytes": rec.bytes, "t_start_us": rec.t_start_us, "t_end_us": rec.t_end_us,
            "peers": [{"peer": p.peer, "dir": p.dir, "bytes": p.bytes, "t_first_us": p.t_first_us,
                       "t_last_us": p.t_last_us, "done": p.done, "net_us": p.net_us,
                       "flows": [{"sport": f.sport, "bytes": f.bytes, "t_last_us": f.t_last_us, "net_us": f.net_us}
                                 for f in p.flows]} for p in rec.peers]}


def _post_run(client: TestClient, run: SimRun, clock: list[int]) -> None:
    """Post the run's records as its agents would, each batch arriving at its simulated time
    (the controller's clock, `clock[0]`, is moved to it), heartbeats included."""
    batches: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for d in run.deliveries:
        batches[(d.arrival_us // 500_000, d.record.host)].append(_record_json(d.record))
    for at_us, host in run.heartbeats:
        batches.setdefault((at_us // 500_000, host), [])
    for (tick, host), batch in sorted(batches.items()):
        clock[0] = (tick + 1) * 500_000
        r = client.post("/v1/telemetry/collectives", json={"host": host, "records": batch})
        assert r.status_code == 202, r.text
    clock[0] = run.end_us


def test_a_hung_rank_opens_one_alarm_and_isolates_its_host(job: TestClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    telemetry = job.app.state.telemetry  # type: ignore[attr-defined]
    # The test steps the detectors itself, on the whole run: the background worker, stepping
    # while the batches arrive, would judge a half-posted run (on a loaded machine it did).
    telemetry.worker.stop()
    timeout_s = telemetry.config.hang_timeout_s
    duration_s = timeout_s + 12
    cfg = SimConfig(job="train", nranks=NRANKS, hosts_per_leaf=4, spines=2, duration_s=duration_s,
                    start_us=now_us() - int(duration_s * 1e6), skew_us=2_000_000,
                    faults=(Fault("noncomm_hang", 5.0, "5"),))
    run = simulate(cfg)
    clock = [0]
    monkeypatch.setattr("controller.services.telemetry.now_us", lambda: clock[0])
    telemetry.worker.stop()
    _post_run(job, run, clock)
    telemetry.step()
    telemetry.step()
    alarms = job.get("/v1/alarms", params={"job": "train"}).json()["alarms"]
    assert [a["kind"] for a in alarms] == ["noncomm_hang"], alarms
    assert alarms[0]["suspects"][0] == {"kind": "host", "name": "host5"}
    assert alarms[0]["evidence"]["summary"]
    isolated = job.get("/v1/hosts", params={"state": "isolated"}).json()["hosts"]
    assert [h["name"] for h in isolated] == ["host5"] and isolated[0]["alarm"] == alarms[0]["id"]
