"""Telemetry sharded across two real `c4 serve` processes on one real PostgreSQL.

Every replica accepts telemetry; each job's records reach the detectors of the one replica
that owns the job's shard (and no other); kill -9 of that owner mid-stream hands its shards to
the survivor within seconds, which replays the inbox and keeps each alarm single: one alarm,
one `alarm.opened` delivery per incident, whichever replica saw it first.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text

from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import SimConfig, simulate
from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.services.telemetry_shards import ShardOwnership, job_shard
from controller.settings import Settings
from controller.store import telemetry_inbox_repo
from controller.store.db import make_engine, make_sessions, transaction
from controller.store.tables import AlarmRow, Base, JobRow
from tests.integration.test_telemetry_api import _record_json
from tests.support.receiver import Receiver
from tests.support.serve import Served, served

pytestmark = pytest.mark.postgres

SHARDS = 8
NRANKS = 8
TAKEOVER_LIMIT_S = 10.0
BATCH_US = 500_000  # an agent posts what it has every half second
SETTINGS = {"telemetry_shards": str(SHARDS), "telemetry_replay_s": "60", "detector_interval_s": "0.25",
            "hang_timeout_s": "3", "alarm_quiet_s": "120", "webhook_backoff_s": "0.1", "auto_isolate": "false"}


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    if not os.environ.get("C4_TEST_DATABASE_URL"):
        pytest.skip("telemetry replicas tier: C4_TEST_DATABASE_URL is not set (make test starts PostgreSQL)")
    url: str = request.getfixturevalue("_pg_migrated")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(t.name for t in Base.metadata.sorted_tables)} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return url


@pytest.fixture
def replicas(pg_url: str, tmp_path: Path) -> Iterator[list[Served]]:
    with ExitStack() as stack:
        pair = []
        for i in range(2):
            folder = tmp_path / f"replica{i}"
            folder.mkdir()
            pair.append(stack.enter_context(served(folder, database_url=pg_url, **SETTINGS)))
        first = pair[0]
        r = httpx.post(f"{first.url}/v1/topology/generate", headers=first.headers, timeout=30,
                       json={"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 4, "ports_per_nic": 1})
        assert r.status_code == 201, r.text
        _wait_split(pair, pg_url)
        try:
            yield pair
        finally:
            for client in _CLIENTS.values():
                client.close()
            _CLIENTS.clear()


def _owners(pg_url: str) -> dict[int, int]:
    """Shard -> pid of the `c4 serve` owning it (its connection's application name ends in it)."""
    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            return {s: int(name.rsplit(":", 1)[1]) for s, name in telemetry_inbox_repo.owners(conn).items()}
    finally:
        engine.dispose()


def _wait_split(pair: list[Served], pg_url: str, timeout_s: float = 20.0) -> dict[int, int]:
    """Until every shard is owned, half by each live replica."""
    pids = {s.proc.pid for s in pair if s.proc.poll() is None}
    deadline = time.monotonic() + timeout_s
    while True:
        owners = _owners(pg_url)
        counts = {pid: sum(1 for p in owners.values() if p == pid) for pids_ in [pids] for pid in pids_}
        if len(owners) == SHARDS and set(owners.values()) == pids and len(set(counts.values())) == 1:
            return owners
        assert time.monotonic() < deadline, f"shards not split over {pids}: {owners}"
        time.sleep(0.2)


def _job_named(prefix: str, shards: set[int]) -> str:
    return next(f"{prefix}-{i}" for i in range(1000) if job_shard(f"{prefix}-{i}", SHARDS) in shards)


def _add_job(pg_url: str, name: str) -> None:
    engine = make_engine(pg_url)
    spec = {"name": name, "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(NRANKS)]}
    with transaction(make_sessions(engine)) as s:
        s.add(JobRow(name=name, spec=spec, status="planned", version=1, created_at_us=now_us(), updated_at_us=now_us()))
    engine.dispose()


_CLIENTS: dict[str, httpx.Client] = {}


def _client(server: Served) -> httpx.Client:
    """One keep-alive client per replica (a new connection per request costs more than the request)."""
    if server.url not in _CLIENTS:
        _CLIENTS[server.url] = httpx.Client(base_url=server.url, headers=server.headers, timeout=10)
    return _CLIENTS[server.url]


def _detected(server: Served) -> float:
    body = _client(server).get("/metrics").text
    m = re.search(r"^c4_telemetry_detected_records_total ([0-9.e+]+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def test_telemetry_posted_to_either_replica_reaches_the_owner(replicas: list[Served], pg_url: str) -> None:
    owners = _owners(pg_url)
    jobs = {server.proc.pid: _job_named(f"job{i}", {s for s, p in owners.items() if p == server.proc.pid})
            for i, server in enumerate(replicas)}
    for job in jobs.values():
        _add_job(pg_url, job)
    before = {s.proc.pid: _detected(s) for s in replicas}
    posted: dict[str, int] = defaultdict(int)
    for seq in range(40):
        for job in jobs.values():
            target = replicas[seq % 2]  # each job's telemetry goes to both replicas in turn
            recs = [{"job": job, "comm": "0xc0", "rank": r, "nranks": NRANKS, "op": "AllReduce", "seq": seq,
                     "bytes": 1 << 20, "t_start_us": now_us() - 2000, "t_end_us": now_us(), "peers": []}
                    for r in range(NRANKS)]
            r = _client(target).post("/v1/telemetry/collectives", json={"host": "host0", "records": recs})
            assert r.status_code == 202 and r.json() == {"accepted": NRANKS}, r.text
            posted[job] += NRANKS
    deadline = time.monotonic() + 15
    while True:
        gained = {pid: _detected(s) - before[pid] for pid, s in ((s.proc.pid, s) for s in replicas)}
        if all(gained[pid] >= posted[job] for pid, job in jobs.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # Each replica's detectors saw exactly its own job's records, whichever replica took them.
    assert gained == {pid: float(posted[job]) for pid, job in jobs.items()}
    for server in replicas:
        for pid, job in jobs.items():
            r = _client(server).get(f"/v1/telemetry/jobs/{job}/rate-matrix")
            if pid == server.proc.pid:
                assert r.status_code == 200 and r.json()["comms"][0]["comm"] == "0xc0", r.text
            else:
                assert r.status_code == 503 and r.json()["error"]["details"]["owner"].endswith(f":{pid}"), r.text


def _schedule(cfg: SimConfig) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """The run's batches (per host, every BATCH_US) with when they are due (us after the start), heartbeats included."""
    run = simulate(cfg)
    batches: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for d in run.deliveries:
        batches[((d.arrival_us - cfg.start_us) // BATCH_US, d.record.host)].append(_record_json(d.record))
    for at_us, host in run.heartbeats:
        batches.setdefault(((at_us - cfg.start_us) // BATCH_US, host), [])
    return [((tick + 1) * BATCH_US, host, body) for (tick, host), body in sorted(batches.items())]


def test_kill_the_owner_mid_stream_alarms_open_once(replicas: list[Served], pg_url: str) -> None:
    owners = _owners(pg_url)
    # The victim owns the jobs' shards; the survivor leads (delivers webhooks), so the kill
    # cannot land between a delivery and its being marked delivered (webhooks are at least once).
    survivor, victim = replicas
    assert _client(survivor).get("/readyz").json()["checks"]["leader"] == "this process"
    mine = {s for s, p in owners.items() if p == victim.proc.pid}
    early, late = _job_named("early", mine), _job_named("late", mine)
    for job in (early, late):
        _add_job(pg_url, job)
    start = now_us()
    duration_s = 16.0
    # `early` hangs at 1 s (its alarm opens on the victim before the kill); `late` at 8 s,
    # after the kill, so only the survivor can open it, from replayed and new telemetry.
    plan = sorted(_schedule(SimConfig(job=early, nranks=NRANKS, hosts_per_leaf=4, spines=2, duration_s=duration_s,
                                      start_us=start, skew_us=20_000, faults=(Fault("noncomm_hang", 1.0, "5"),)))
                  + _schedule(SimConfig(job=late, nranks=NRANKS, hosts_per_leaf=4, spines=2, duration_s=duration_s,
                                        start_us=start, skew_us=20_000, seed=2,
                                        faults=(Fault("noncomm_hang", 8.0, "3"),))),
                  key=lambda b: b[0])
    with Receiver() as rx:
        r = _client(survivor).post("/v1/webhooks", json={"url": rx.url, "events": ["alarm.opened"], "secret": "s3cret-s3cret"})
        assert r.status_code == 201, r.text
        killed_at: float | None = None
        took_over_s: float | None = None
        checked = 0.0
        for i, (due_us, host, body) in enumerate(plan):
            wait_s = (start + due_us - now_us()) / 1e6
            if wait_s > 0:
                time.sleep(wait_s)
            if killed_at is None and any(json_event(e, early) for e in rx.events()):
                os.kill(victim.proc.pid, signal.SIGKILL)  # mid-stream, right after early's alarm went out
                victim.proc.wait(10)
                killed_at = checked = time.monotonic()
            if killed_at is not None and took_over_s is None and time.monotonic() - checked > 0.2:
                checked = time.monotonic()
                if set(_owners(pg_url).values()) == {survivor.proc.pid} and len(_owners(pg_url)) == SHARDS:
                    took_over_s = checked - killed_at
            live = [s for s in replicas if s.proc.poll() is None]
            target = live[i % len(live)]
            r = _client(target).post("/v1/telemetry/collectives", json={"host": host, "records": body})
            assert r.status_code == 202, r.text
        assert killed_at is not None, f"early's alarm never went out before the stream ended: {rx.events()}"
        if took_over_s is None:
            _wait_split([survivor], pg_url, timeout_s=TAKEOVER_LIMIT_S)
            took_over_s = time.monotonic() - killed_at
        print(f"takeover of {SHARDS} shards after kill -9: {took_over_s:.2f} s")
        assert took_over_s <= TAKEOVER_LIMIT_S
        rx.wait_for("alarm.opened", count=2, timeout_s=20)
        time.sleep(3 * float(SETTINGS["detector_interval_s"]) + 1)  # a duplicate would have come by now
        opened = [e["data"]["alarm"] for e in rx.events() if e["event"] == "alarm.opened"]
        assert sorted(a["job"] for a in opened) == sorted([early, late]), opened
        listed = _client(survivor).get("/v1/alarms").json()["alarms"]
        assert sorted((a["job"], a["kind"], a["state"]) for a in listed) == sorted(
            [(early, "noncomm_hang", "open"), (late, "noncomm_hang", "open")]), listed
        suspects = {a["job"]: a["suspects"][0]["name"] for a in listed}
        assert suspects == {early: "host5", late: "host3"}
    # The survivor saw early's hang again in the replayed telemetry and adopted the victim's
    # alarm (its own incident key, opened later) instead of opening a second one.
    engine = make_engine(pg_url)
    with make_sessions(engine)() as s:
        row = s.scalar(select(AlarmRow).where(AlarmRow.job == early))
    engine.dispose()
    assert row is not None and int(row.incident_key.rsplit("/", 1)[1]) > row.opened_at_us, row.incident_key


def json_event(event: dict[str, Any], job: str) -> bool:
    return event.get("event") == "alarm.opened" and event["data"]["alarm"]["job"] == job


def test_shards_rebalance_when_replicas_come_and_go(pg_url: str) -> None:
    """Ownership alone, in one process: a replica joining makes the owner release half, a
    third takes its share, and a replica leaving frees its shards for the others."""
    rts = [Runtime.from_settings(Settings(database_url=pg_url, telemetry_shards=SHARDS)) for _ in range(3)]
    a, b, c = (ShardOwnership(rt, SHARDS, name=f"c4:test:{i}") for i, rt in enumerate(rts))
    try:
        assert a.poll() == (set(range(SHARDS)), set())
        assert b.poll() == (set(), set())  # all held; b counted itself in
        gained, lost = a.poll()
        assert gained == set() and len(lost) == SHARDS // 2 and a.owned.isdisjoint(lost)
        gained, _ = b.poll()
        assert gained == lost and len(b.owned) == SHARDS // 2
        c.poll()  # three replicas: aim ceil(8 / 3) = 3 each
        for _ in range(2):
            for r in (a, b, c):
                r.poll()
        assert sorted(len(r.owned) for r in (a, b, c)) == [2, 3, 3]
        assert a.owned | b.owned | c.owned == set(range(SHARDS))
        assert set(a.owners().values()) == {"c4:test:0", "c4:test:1", "c4:test:2"}
        b.drop()  # b's session ends: its shards are free at once
        for _ in range(2):
            a.poll()
            c.poll()
        assert sorted(len(r.owned) for r in (a, c)) == [4, 4] and a.owned | c.owned == set(range(SHARDS))
    finally:
        for r, rt in zip((a, b, c), rts, strict=True):
            r.drop()
            rt.engine.dispose()
