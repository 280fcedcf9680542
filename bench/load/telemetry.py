"""bench/load, telemetry part: records/s accepted and detected with 1 and 2 replicas side by
side, p50/p99 per endpoint, and the takeover of a killed replica's shards.

Physics: real HTTP (`c4 serve`, one uvicorn worker per replica, keep-alive clients) + a real
PostgreSQL (its own throw-away server, started with scripts/test-postgres.sh) + c4's own
detectors (the sharded path of services.telemetry). The records' content comes from c4's own
C4D simulator (one 64-rank run, copied under 16 job names: 1,024 ranks on 64 hosts), posted
per host in batches of at most `--batch` records as node agents do, in the form node agents
post: packed (`application/x-c4-collectives`, docs/telemetry-packed.md, built by the agent's own
node_agent.packed) or, with `--encoding json` or `json,packed`, the JSON form beside it.

Run: `.venv/bin/python -m bench.load telemetry [--records N] [--clients K] [--replicas 1,2]
[--encoding packed|json|json,packed]`. For each replica count and encoding: a fresh database, the replicas started and their shards split, then
K client processes post every batch once, round robin over the replicas, while an operator
thread polls GET /v1/alarms and GET /v1/hosts. Accepted/s is records over the posting wall
time; detected/s is records over the time until the replicas' detectors had read them all
(`c4_telemetry_detected_records_total`). CPU seconds of the replicas and of PostgreSQL give
per-core rates. With 2 replicas, one is then killed with SIGKILL and the time until the other
owns every shard (PostgreSQL's advisory locks) is the takeover time.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from controller.diagnosis.simulator import SimConfig, simulate
from controller.services.clock import now_us
from controller.store import telemetry_inbox_repo
from controller.store.db import make_engine, make_sessions, transaction
from controller.store.migrate import upgrade
from controller.store.tables import JobRow
from node_agent import packed as agent_packed

TOKEN = "bench-load-admin"
ROOT = Path(__file__).resolve().parents[2]
JOBS = 16
RANKS = 64
SHARDS = 64
TARGET_RECORDS_PER_S = 50_000
TARGET_SCALING = 1.8
TARGET_TAKEOVER_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(ppid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == ppid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


class Postgres:
    """A throw-away PostgreSQL server of this run (scripts/test-postgres.sh), stopped at exit."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"c4-load-pg-{os.getpid()}-")
        self.env = {**os.environ, "C4_TEST_PG_DIR": self.dir, "C4_TEST_PG_PORT": str(_free_port())}

    def __enter__(self) -> str:
        out = subprocess.run([str(ROOT / "scripts" / "test-postgres.sh"), "start"], env=self.env, capture_output=True,
                             text=True, timeout=120, check=True)
        return out.stdout.strip()

    def cpu_s(self) -> float:
        pid = int((Path(self.dir) / "postmaster.pid").read_text().split()[0])
        return _cpu_s(pid) + sum(_cpu_s(c) for c in _children(pid))

    def __exit__(self, *_: object) -> None:
        subprocess.run([str(ROOT / "scripts" / "test-postgres.sh"), "stop"], env=self.env, capture_output=True,
                       timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    url: str

    @property
    def pid(self) -> int:
        return self.proc.pid


def _start(db_url: str, tmp: Path, i: int) -> Replica:
    port = _free_port()
    env = {**os.environ, "C4_DATABASE_URL": db_url, "C4_ADMIN_TOKEN": TOKEN, "C4_LOG_LEVEL": "warning",
           "C4_AUTO_ISOLATE": "false", "C4_DATA_DIR": str(tmp / f"r{i}"), "C4_TELEMETRY_SHARDS": str(SHARDS)}
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "serve", "--port", str(port), "--workers", "1",
                             "--no-migrate"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Replica(proc, f"http://127.0.0.1:{port}")


def _ready(r: Replica) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if r.proc.poll() is not None:
            raise RuntimeError("c4 serve exited at start")
        try:
            if httpx.get(f"{r.url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("c4 serve not ready in 90 s")


def _owners(db_url: str) -> dict[int, str]:
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            return telemetry_inbox_repo.owners(conn)
    finally:
        engine.dispose()


def _wait_owned(db_url: str, pids: set[int], timeout_s: float, poll_s: float = 0.05) -> float:
    """Seconds until every shard is owned, evenly, by exactly the replicas `pids`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        owners = _owners(db_url)
        held = [int(name.rsplit(":", 1)[1]) for name in owners.values() if name.startswith("c4:")]
        counts = {p: held.count(p) for p in pids}
        if len(owners) == SHARDS and set(held) == pids and max(counts.values()) - min(counts.values()) <= 1:
            return time.monotonic() - start
        time.sleep(poll_s)
    raise RuntimeError(f"shards not owned by {pids} within {timeout_s} s: {_owners(db_url)}")


def _detected(r: Replica) -> float:
    try:
        body = httpx.get(f"{r.url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return 0.0
    m = re.search(r"^c4_telemetry_detected_records_total ([0-9.e+]+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def _record_json(rec: Any, job: str) -> dict[str, Any]:
    return {"job": job, "comm": rec.comm, "rank": rec.rank, "nranks": rec.nranks, "op": rec.op, "seq": rec.seq,
            "bytes": rec.bytes, "t_start_us": rec.t_start_us, "t_end_us": rec.t_end_us,
            "peers": [{"peer": p.peer, "dir": p.dir, "bytes": p.bytes, "t_first_us": p.t_first_us,
                       "t_last_us": p.t_last_us, "done": p.done, "net_us": p.net_us} for p in rec.peers]}


ENCODINGS = ("json", "packed")
CONTENT_TYPES = {"json": "application/json", "packed": agent_packed.CONTENT_TYPE}


def _batches(total: int, batch: int) -> dict[str, list[bytes]]:
    """`total` records of 16 jobs x 64 ranks (host{r} runs rank r of every job), per host in
    arrival order, cut into batches of at most `batch` records; the same batches in each form
    ("json"; "packed": as the node agent packs a record, node_agent.packed.body)."""
    per_job = -(-total // JOBS)
    duration_s = 30.0
    records: list[Any] = []
    seed = 1
    while len(records) < per_job:
        run = simulate(SimConfig(job="load", nranks=RANKS, duration_s=duration_s,
                                 start_us=now_us() - int(duration_s * 1e6), seed=seed))
        records += [d.record for d in run.deliveries]
        seed += 1
    records = records[:per_job]
    by_host: dict[str, list[dict[str, Any]]] = {}
    for j in range(JOBS):
        for rec in records:
            by_host.setdefault(rec.host, []).append(_record_json(rec, f"load-{j:02d}"))
    out: dict[str, list[bytes]] = {"json": [], "packed": []}
    for host, recs in sorted(by_host.items()):
        # interleave the jobs within a host's stream, as an agent serving 16 ranks would
        recs.sort(key=lambda r: (r["t_start_us"], r["job"]))
        for i in range(0, len(recs), batch):
            part = recs[i:i + batch]
            out["json"].append(json.dumps({"host": host, "records": part}).encode())
            out["packed"].append(agent_packed.body(host, [json.dumps(r).encode() for r in part]))
    return out


def _post_worker(urls: list[str], bodies: list[bytes], threads: int, queue: Any, content_type: str) -> None:
    """A client process: `threads` keep-alive clients posting `bodies`, round robin over `urls`."""
    lat: list[float] = []
    errors: list[str] = []
    accepted = 0
    refused = [0]
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type}

    def run(mine: Sequence[tuple[int, bytes]]) -> None:
        nonlocal accepted
        clients = [httpx.Client(base_url=u, headers=headers, timeout=60) for u in urls]
        try:
            for i, body in mine:
                for _attempt in range(30):  # as an agent does: keep the batch, retry after Retry-After
                    t0 = time.perf_counter()
                    r = clients[i % len(clients)].post("/v1/telemetry/collectives", content=body)
                    dt = time.perf_counter() - t0
                    with lock:
                        lat.append(dt)
                        if r.status_code == 202:
                            accepted += int(r.json()["accepted"])
                        elif r.status_code in (429, 503):
                            refused[0] += 1
                        else:
                            errors.append(f"{r.status_code} {r.text[:200]}")
                    if r.status_code not in (429, 503):
                        break
                    time.sleep(float(r.headers.get("retry-after", "1")))
        finally:
            for c in clients:
                c.close()

    indexed = list(enumerate(bodies))
    workers = [threading.Thread(target=run, args=(indexed[k::threads],)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    queue.put((accepted, lat, errors, refused[0]))


@dataclass
class Result:
    replicas: int
    encoding: str
    records: int
    accepted: int
    post_s: float
    detect_s: float
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    replica_cpu_s: float = 0.0
    pg_cpu_s: float = 0.0
    takeover_s: float | None = None
    replayed: float | None = None
    replay_s: float | None = None
    retried: int = 0


def _reset(db_url: str) -> None:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    upgrade(db_url)


FABRIC_DOC = {"kind": "leaf-spine", "leaves": 8, "spines": 4, "hosts_per_leaf": 8, "ports_per_nic": 1}


def _setup(db_url: str, base: str, fabric: dict[str, Any] = FABRIC_DOC) -> None:
    """The fabric (`POST /v1/topology/generate`) and the 16 telemetry jobs, planned, with no flows."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{base}/v1/topology/generate", headers=headers, timeout=60, json=fabric)
    r.raise_for_status()
    engine = make_engine(db_url)
    with transaction(make_sessions(engine)) as s:
        for j in range(JOBS):
            spec = {"name": f"load-{j:02d}", "ranks": [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"}
                                                       for i in range(RANKS)]}
            s.add(JobRow(name=spec["name"], spec=spec, status="planned", version=1, created_at_us=now_us(),
                         updated_at_us=now_us()))
    engine.dispose()


def _operator(urls: list[str], stop: threading.Event, lat: dict[str, list[float]]) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    clients = [httpx.Client(base_url=u, headers=headers, timeout=30) for u in urls]
    i = 0
    while not stop.is_set():
        for path in ("/v1/alarms", "/v1/hosts"):
            t0 = time.perf_counter()
            clients[i % len(clients)].get(path)
            lat.setdefault(f"GET {path}", []).append(time.perf_counter() - t0)
            i += 1
        stop.wait(0.1)
    for c in clients:
        c.close()


def run_once(db_url: str, pg: Postgres, n_replicas: int, encoding: str, bodies: list[bytes], n_records: int,
             clients: int, threads: int, takeover: bool) -> Result:
    _reset(db_url)
    with tempfile.TemporaryDirectory(prefix="c4-load-") as tmp:
        replicas: list[Replica] = []
        try:
            for i in range(n_replicas):
                replicas.append(_start(db_url, Path(tmp), i))
                _ready(replicas[-1])  # one after the other: the first leads
            _setup(db_url, replicas[0].url)
            _wait_owned(db_url, {r.pid for r in replicas}, 30)
            urls = [r.url for r in replicas]
            before = sum(_detected(r) for r in replicas)
            cpu0 = sum(_cpu_s(r.pid) for r in replicas)
            pg0 = pg.cpu_s()
            ctx = multiprocessing.get_context("fork")
            queue = ctx.Queue()
            stop = threading.Event()
            op_lat: dict[str, list[float]] = {}
            operator = threading.Thread(target=_operator, args=(urls, stop, op_lat))
            start = time.perf_counter()
            procs = [ctx.Process(target=_post_worker, args=(urls, bodies[k::clients], threads, queue,
                                                                  CONTENT_TYPES[encoding]))
                     for k in range(clients)]
            for p in procs:
                p.start()
            operator.start()
            got = [queue.get(timeout=600) for _ in procs]
            post_s = time.perf_counter() - start
            for p in procs:
                p.join(30)
            accepted = sum(g[0] for g in got)
            deadline = time.monotonic() + 300
            while sum(_detected(r) for r in replicas) - before < accepted and time.monotonic() < deadline:
                time.sleep(0.05)
            detect_s = time.perf_counter() - start
            stop.set()
            operator.join(30)
            result = Result(n_replicas, encoding, n_records, accepted, post_s, detect_s,
                            {"POST /v1/telemetry/collectives": [x for g in got for x in g[1]], **op_lat},
                            [e for g in got for e in g[2]][:5],
                            sum(_cpu_s(r.pid) for r in replicas) - cpu0, pg.cpu_s() - pg0,
                            retried=sum(g[3] for g in got))
            if takeover and n_replicas >= 2:
                victim, rest = replicas[-1], replicas[:-1]
                before_rest = sum(_detected(r) for r in rest)
                os.kill(victim.pid, signal.SIGKILL)
                victim.proc.wait(10)
                result.takeover_s = _wait_owned(db_url, {r.pid for r in rest}, 60, poll_s=0.02)
                # The survivors replay the victim's shards (the last telemetry_replay_s of them).
                t0, last, stable_since = time.monotonic(), before_rest, time.monotonic()
                while time.monotonic() - stable_since < 2.0 and time.monotonic() - t0 < 120:
                    now = sum(_detected(r) for r in rest)
                    if now != last:
                        last, stable_since = now, time.monotonic()
                    time.sleep(0.1)
                result.replayed = last - before_rest
                result.replay_s = stable_since - t0
            return result
        finally:
            for r in replicas:
                if r.proc.poll() is None:
                    r.proc.send_signal(signal.SIGTERM)
                    try:
                        r.proc.wait(30)
                    except subprocess.TimeoutExpired:
                        r.proc.kill()


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load telemetry", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500, help="records per batch at most")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--threads", type=int, default=2, help="keep-alive connections per client process")
    parser.add_argument("--replicas", default="1,2", help="replica counts to run, side by side")
    parser.add_argument("--encoding", default="packed",
                        help="the batches' form: packed (what node agents post), json, or both side by side "
                             "(json,packed)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.replicas.split(",")]
    encodings = [x.strip() for x in args.encoding.split(",")]
    if not encodings or any(e not in ENCODINGS for e in encodings):
        parser.error(f"--encoding: one or more of {', '.join(ENCODINGS)}")
    print(f"uptime before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    bodies = _batches(args.records, args.batch)
    n_records = sum(len(json.loads(b)["records"]) for b in bodies["json"])
    sizes = {e: sum(map(len, bodies[e])) / n_records for e in encodings}
    print(f"{n_records} records of {JOBS} jobs x {RANKS} ranks on 64 hosts in {len(bodies['json'])} batches "
          f"({', '.join(f'{e}: {b:.0f} bytes per record' for e, b in sizes.items())}); "
          f"{args.clients} client processes x {args.threads} connections; {SHARDS} shards", flush=True)
    results = []
    pg = Postgres()
    with pg as db_url:
        for n in counts:
            for e in encodings:  # side by side: the encodings alternate within each replica count
                res = run_once(db_url, pg, n, e, bodies[e], n_records, args.clients, args.threads,
                               takeover=n == max(counts) and e == encodings[-1])
                results.append(res)
                print(f"  {n} replica(s), {e}: accepted {res.accepted / res.post_s:,.0f} records/s, detected "
                      f"{res.accepted / res.detect_s:,.0f} records/s; {res.retried} batches retried after 429/503; "
                      f"errors {res.errors}", flush=True)
    _report(results)
    print(f"uptime after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    return 0


def _report(results: list[Result]) -> None:
    cores = os.cpu_count() or 1
    print("\n| replicas | encoding | records | accepted records/s | detected records/s | replicas' CPU s "
          "| PostgreSQL CPU s | records per controller CPU s | records per total CPU s (controller + PostgreSQL) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        total_cpu = r.replica_cpu_s + r.pg_cpu_s
        print(f"| {r.replicas} | {r.encoding} | {r.accepted:,} of {r.records:,} | {r.accepted / r.post_s:,.0f} | "
              f"{r.accepted / r.detect_s:,.0f} | {r.replica_cpu_s:.1f} | {r.pg_cpu_s:.1f} | "
              f"{r.accepted / max(r.replica_cpu_s, 1e-9):,.0f} | {r.accepted / max(total_cpu, 1e-9):,.0f} |")
    print("\n| replicas | encoding | endpoint | requests | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for r in results:
        for name, xs in r.latencies.items():
            print(f"| {r.replicas} | {r.encoding} | {name} | {len(xs)} | {_pct(xs, 0.5):.1f} | {_pct(xs, 0.99):.1f} |")
    for enc in dict.fromkeys(r.encoding for r in results):
        by = {r.replicas: r for r in results if r.encoding == enc}
        if 1 in by and 2 in by:
            one, two = by[1], by[2]
            acc = (two.accepted / two.post_s) / (one.accepted / one.post_s)
            det = (two.accepted / two.detect_s) / (one.accepted / one.detect_s)
            rate2 = two.accepted / two.detect_s
            print(f"\n{enc}: 2 replicas vs 1: accepted x{acc:.2f}, detected x{det:.2f} (target x{TARGET_SCALING}); "
                  f"2-replica detected rate {rate2:,.0f} records/s (target {TARGET_RECORDS_PER_S:,}) on {cores} "
                  f"cores: {'met' if rate2 >= TARGET_RECORDS_PER_S and det >= TARGET_SCALING else 'NOT met'}")
    for r in results:
        if r.takeover_s is not None:
            print(f"takeover after kill -9 of 1 of {r.replicas} replicas ({r.encoding}): {r.takeover_s:.2f} s until "
                  f"the survivors own all {SHARDS} shards (target {TARGET_TAKEOVER_S:.0f} s: "
                  f"{'met' if r.takeover_s <= TARGET_TAKEOVER_S else 'NOT met'}); replayed {r.replayed:,.0f} "
                  f"records into their detectors in {r.replay_s:.1f} s")


if __name__ == "__main__":
    raise SystemExit(main())
