"""The planner half of `bench/load`: job churn and assignment reads against a real controller
(`c4 serve --workers N` on a throw-away PostgreSQL, real HTTP), on a 64-host leaf-spine fabric
(16 leaves x 4 hosts, 8 spines, one dual-port NIC per host) with 4-rank ring jobs of 8 flows
each (one channel, two QPs per connection) on seeded random hosts.

Parts, each printed as one row per source tree (`--tree` runs the same client against
another checkout, e.g. main's, in the same run, side by side):

- `burst`: 400 jobs POSTed at once (8 client threads); seconds until none is pending.
- `churn-100`, `churn-1000`: that many jobs active and planned first; then for `--churn-s`
  seconds, every 1/rate s, one job DELETEd (the oldest) and one POSTed (open loop at
  `--rate` jobs/s); planned jobs/s = churned jobs planned / (time the last one left
  `pending` - start), backlog = jobs still pending when the churn stopped.
- `burst-pods`: 400 jobs POSTed at once on an 8-pod clos3 instead (8 pods x 4 leaves x 4 hosts,
  4 spines per pod, 8 cores, one dual-port NIC per host), each job's 4 hosts inside one pod and
  `--pod-job-channels` (4) channels per connection (32 flows a job, 12,800 in all):
  the batches split into independent parts (`te.parts`), planned in the planner's thread or,
  with `--plan-processes 2` (`C4_PLAN_PROCESSES`), in planning processes. `--plan-processes
  0,2` runs every part once per value, side by side.
- `reads`: GET /v1/jobs/{name}/assignments?host=..&after_version=v-1&wait_s=30 (what an
  agent sends after it saw a version change: answered at once) at `--read-rate` requests/s
  for `--read-s` seconds (open loop: latency counted from the scheduled send time), while
  128 agents hold long-polls waiting for the next version (after_version=v); p50/p99/max of
  all reads, and p99/max of those scheduled after the first `--read-warmup-s` seconds (1 s:
  the controller's per-process document cache starts cold, and the first reads of each job
  go to the database; measured 2026-12-03: every read over 100 ms fell in the first 0.95 s).
  The client's cyclic garbage collector is off while it measures.

Physics: c4's own planner, on a real PostgreSQL, through real HTTP and uvicorn workers; the
client runs on the same machine (its CPU competes with the server's: figures are a floor).
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools
import httpx
import requests
import uvloop

from controller.domain.jobs import JobSpec, Pattern, RankSpec, TrafficSpec
from controller.services.jobs import spec_to_document

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "bench-load-admin"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
FABRIC: dict[str, Any] = {"kind": "leaf-spine", "leaves": 16, "spines": 8, "hosts_per_leaf": 4}
HOSTS = 64
PODS_FABRIC: dict[str, Any] = {"kind": "clos3", "pods": 8, "leaves_per_pod": 4, "spines_per_pod": 4, "cores": 8,
                               "hosts_per_leaf": 4}
POD_HOSTS = 16  # host{16p} .. host{16p + 15} are pod p's


def job_doc(name: str, rng: random.Random, pods: int = 0, channels: int = 1) -> dict[str, Any]:
    """A 4-rank ring (`channels` x 2 QPs per connection) on random hosts of the leaf-spine, or
    (`pods`) of one of that many pods."""
    if pods:
        pod = rng.randrange(pods)
        hosts = [pod * POD_HOSTS + h for h in rng.sample(range(POD_HOSTS), 4)]
    else:
        hosts = rng.sample(range(HOSTS), 4)
    ranks = tuple(RankSpec(r, f"host{h}", "mlx5_0") for r, h in enumerate(hosts))
    return spec_to_document(JobSpec(name, ranks, (TrafficSpec(Pattern.RING, (0, 1, 2, 3), channels=channels,
                                                              qps_per_connection=2),)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _psql(pg_bin: str, port: int, sql: str) -> None:
    run = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*run, f"{pg_bin}/psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-qc", sql],
                   check=True, capture_output=True)


def _pg_bin() -> str:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not found:
        raise SystemExit("PostgreSQL binaries not found (apt-get install postgresql)")
    return str(found[-1])


@contextmanager
def postgres_database(prefix: str) -> Iterator[str]:
    """A fresh database on the throw-away server of scripts/test-postgres.sh (started if
    needed, with the caller's C4_TEST_PG_PORT/C4_TEST_PG_DIR); dropped afterwards."""
    url = subprocess.run([str(ROOT / "scripts" / "test-postgres.sh"), "start"], check=True, capture_output=True,
                         text=True).stdout.strip()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    name = f"{prefix}_{os.getpid()}_{int(time.time() * 1000) % 10_000_000}"
    _psql(_pg_bin(), port, f"CREATE DATABASE {name}")
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        _psql(_pg_bin(), port, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def controller(tree: Path, url: str, workers: int, log: Path, fabric: dict[str, Any] = FABRIC,
               env_extra: dict[str, str] | None = None) -> Iterator[str]:
    """`c4 migrate` then `c4 serve --workers N` from source tree `tree`; yields its base URL."""
    env = {**os.environ, "PYTHONPATH": str(tree), "C4_DATABASE_URL": url, "C4_ADMIN_TOKEN": TOKEN,
           "C4_LOG_LEVEL": "warning", "C4_DATA_DIR": str(log.parent), **(env_extra or {})}
    subprocess.run([sys.executable, "-m", "controller.cli", "migrate"], cwd=tree, env=env, check=True,
                   capture_output=True)
    port = _free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "serve", "--port", str(port), "--workers",
                                 str(workers), "--no-migrate"], cwd=tree, env=env, stdout=out, stderr=out,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"the controller exited ({proc.returncode}); see {log}")
            time.sleep(0.2)
        r = requests.post(f"{base}/v1/topology/generate", json=fabric, headers=HEADERS, timeout=60)
        r.raise_for_status()
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Tracker:
    """Polls the pending list; records when each job left it (planned or failed)."""

    base: str
    left: dict[str, float] = field(default_factory=dict)
    posted: dict[str, float] = field(default_factory=dict)  # when its POST was sent
    accepted: set[str] = field(default_factory=set)  # its POST answered 202 (it was pending then)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, session: requests.Session, doc: dict[str, Any]) -> None:
        name = str(doc["name"])
        with self._lock:
            self.posted[name] = time.monotonic()
        r = session.post(f"{self.base}/v1/jobs", json=doc, headers=HEADERS, timeout=120)
        if r.status_code != 202:
            raise RuntimeError(f"POST {name}: {r.status_code} {r.text[:200]}")
        with self._lock:
            self.accepted.add(name)

    def poll_once(self, session: requests.Session) -> set[str]:
        with self._lock:
            accepted = set(self.accepted)  # read before the list: each was pending when accepted
        r = session.get(f"{self.base}/v1/jobs", params={"status": "pending"}, headers=HEADERS, timeout=120)
        r.raise_for_status()
        pending = {j["name"] for j in r.json()["jobs"]}
        now = time.monotonic()
        with self._lock:
            for name in accepted:
                if name not in pending and name not in self.left:
                    self.left[name] = now
        return pending

    def wait(self, names: set[str], timeout: float) -> bool:
        with requests.Session() as s:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self.poll_once(s)
                if names <= set(self.left):
                    return True
                time.sleep(0.25)
        return False

    def background(self) -> threading.Thread:
        def run() -> None:
            with requests.Session() as s:
                while not self._stop.is_set():
                    self.poll_once(s)
                    time.sleep(0.25)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t


def _failed(base: str) -> int:
    r = requests.get(f"{base}/v1/jobs", params={"status": "failed"}, headers=HEADERS, timeout=120)
    return len(r.json()["jobs"])


def post_all(tracker: Tracker, docs: list[dict[str, Any]], threads: int = 8) -> None:
    local = threading.local()

    def one(doc: dict[str, Any]) -> None:
        if not hasattr(local, "s"):
            local.s = requests.Session()
        tracker.post(local.s, doc)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, docs))


def burst(base: str, n: int, timeout: float, seed: int, pods: int = 0, channels: int = 1) -> dict[str, object]:
    rng = random.Random(seed)
    tracker = Tracker(base)
    docs = [job_doc(f"b{i}", rng, pods, channels) for i in range(n)]
    t0 = time.monotonic()
    post_all(tracker, docs)
    posted_s = time.monotonic() - t0
    done = tracker.wait({str(d["name"]) for d in docs}, timeout)
    elapsed = max(tracker.left.values(), default=t0) - t0 if done else None
    return {"part": "burst", "jobs": n, "posted_s": posted_s, "all_planned_s": elapsed,
            "planned": len(tracker.left), "failed": _failed(base),
            "jobs_per_s": (n / elapsed) if elapsed else len(tracker.left) / timeout}


def churn(base: str, active: int, rate: float, seconds: float, setup_timeout: float, drain_timeout: float,
          seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    tracker = Tracker(base)
    docs = [job_doc(f"a{i}", rng) for i in range(active)]
    t0 = time.monotonic()
    post_all(tracker, docs)
    if not tracker.wait({str(d["name"]) for d in docs}, setup_timeout):
        return {"part": f"churn-{active}", "setup_s": None, "note": f"setup: {len(tracker.left)}/{active} "
                f"planned after {setup_timeout:.0f} s"}
    setup_s = time.monotonic() - t0
    live = [str(d["name"]) for d in docs]
    churned: list[str] = []
    poller = tracker.background()
    session = requests.Session()
    start = time.monotonic()
    i = 0
    with ThreadPoolExecutor(8) as pool:
        while time.monotonic() - start < seconds:
            due = start + i / rate
            time.sleep(max(0.0, due - time.monotonic()))
            old = live.pop(0)
            doc = job_doc(f"c{i}", rng)
            live.append(str(doc["name"]))
            churned.append(str(doc["name"]))
            pool.submit(session.delete, f"{base}/v1/jobs/{old}", headers=HEADERS, timeout=120)
            pool.submit(tracker.post, session, doc)
            i += 1
    posted_all = time.monotonic()  # every POST and DELETE answered
    stopped = start + seconds
    tracker._stop.set()
    poller.join()
    with requests.Session() as s:
        backlog = len(tracker.poll_once(s) & set(churned))
    in_window = sum(1 for n in churned if tracker.left.get(n, float("inf")) <= posted_all)
    done = tracker.wait(set(churned), drain_timeout)
    last = max((tracker.left[n] for n in churned if n in tracker.left), default=stopped)
    planned = sum(1 for n in churned if n in tracker.left)
    lat = sorted(tracker.left[n] - tracker.posted[n] for n in churned if n in tracker.left)
    return {"part": f"churn-{active}", "setup_s": setup_s, "offered_per_s": rate, "churned": len(churned),
            "posts_done_s": posted_all - start, "planned_by_then": in_window, "backlog_then": backlog,
            "all_planned": done, "planned": planned, "last_planned_s": last - start,
            "jobs_per_s": planned / (last - start) if last > start else 0.0,
            "post_to_planned_p50_s": _pct(lat, 50), "post_to_planned_p99_s": _pct(lat, 99),
            "failed": _failed(base)}


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(len(values) * p / 100))]


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection of the read generator: a raw GET written as prepared
    bytes, the answer parsed by httptools (uvicorn's own parser). httpx's client cost ~5 ms of
    CPU per request here (measured: 13.5 CPU s for 2,400 reads), so it could not offer 1,000
    reads/s on the 2 cores it shares with the server; this costs a small fraction of that."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.chunks: list[bytes] = []
        self.done: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result((self.parser.get_status_code(), b"".join(self.chunks)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))

    async def get(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.chunks = []
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.done


async def _reads(base: str, targets: list[tuple[str, str, int]], rate: float, seconds: float,
                 waiting: int, connections: int = 128) -> tuple[list[tuple[float, float]], int, float]:
    """((each read's scheduled time from the start, its latency from then), errors, the latest a
    read was sent after its scheduled time: the generator's own lag)."""
    limits = httpx.Limits(max_connections=waiting, max_keepalive_connections=waiting)  # the waiting agents
    loop = asyncio.get_running_loop()
    host, port = base.removeprefix("http://").rsplit(":", 1)
    async with httpx.AsyncClient(base_url=base, headers=HEADERS, limits=limits, timeout=120) as s:
        errors = 0

        async def hold(name: str, host: str, version: int) -> None:
            while True:  # an agent: waits for the version after the one it has (re-plans move it)
                r = await s.get(f"/v1/jobs/{name}/assignments",
                                params={"host": host, "after_version": version, "wait_s": 30})
                if r.status_code == 200:
                    version = max(version, int(r.json()["version"]))
                else:
                    await asyncio.sleep(1.0)

        async def connect() -> _Connection:
            _, conn = await loop.create_connection(_Connection, host, int(port))
            return conn

        holders = [asyncio.create_task(hold(*targets[k % len(targets)])) for k in range(waiting)]
        idle: asyncio.Queue[_Connection] = asyncio.Queue()
        for _ in range(connections):
            idle.put_nowait(await connect())
        await asyncio.sleep(1.0)
        lat: list[tuple[float, float]] = []
        lag = 0.0
        start = 0.0
        requests_ = [(f"GET /v1/jobs/{name}/assignments?host={h}&after_version={max(0, v - 1)}&wait_s=30 HTTP/1.1\r\n"
                      f"Host: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").encode()
                     for name, h, v in targets]

        async def one(at: float, request: bytes) -> None:
            nonlocal errors
            conn = await idle.get()  # no free connection: the wait counts in the latency
            try:
                if conn.transport is None:
                    conn = await connect()
                status, body = await conn.get(request)
                if status != 200 or b'"assignments"' not in body:
                    errors += 1
            except (OSError, httptools.HttpParserError):
                errors += 1
                if conn.transport is not None:
                    conn.transport.close()
                conn = await connect()
            lat.append((at - start, time.monotonic() - at))
            idle.put_nowait(conn)

        start = time.monotonic()
        tasks = []
        for k in range(int(rate * seconds)):
            at = start + k / rate
            delay = at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = max(lag, -delay)
            tasks.append(asyncio.create_task(one(at, requests_[k % len(requests_)])))
        await asyncio.gather(*tasks)
        for h in holders:
            h.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        while not idle.empty():
            conn = idle.get_nowait()
            if conn.transport is not None:
                conn.transport.close()
        return lat, errors, lag


def _assignment_reads(base: str, workers: int) -> dict[str, float]:
    """`c4_assignment_reads_total` by source, summed over the controller's worker processes:
    each scrape answers one worker's registry (told apart by `process_start_time_seconds`), so
    scrape on fresh connections, several at once (an idle worker accepts every connection one
    at a time), until every worker has answered (or 30 rounds)."""
    seen: dict[str, dict[str, float]] = {}

    def scrape(_: int) -> tuple[str, dict[str, float]]:
        text = requests.get(f"{base}/metrics", headers={**HEADERS, "Connection": "close"}, timeout=30).text
        start, got = "", {}
        for line in text.splitlines():
            if line.startswith("process_start_time_seconds "):
                start = line.split()[1]
            elif line.startswith("c4_assignment_reads_total{"):
                got[line.split('source="', 1)[1].split('"', 1)[0]] = float(line.split()[-1])
        return start, got

    with ThreadPoolExecutor(8) as pool:
        for _ in range(30):
            seen.update(pool.map(scrape, range(8)))
            if len(seen) >= workers:
                break
    out: dict[str, float] = {"workers_scraped": float(len(seen))}
    for got in seen.values():
        for source, n in got.items():
            out[source] = out.get(source, 0.0) + n
    return out


def reads(base: str, rate: float, seconds: float, waiting: int, seed: int, warmup_s: float = 1.0,
          workers: int = 2) -> dict[str, object]:
    rng = random.Random(seed)
    tracker = Tracker(base)
    docs = [job_doc(f"r{i}", rng) for i in range(100)]
    post_all(tracker, docs)
    if not tracker.wait({str(d["name"]) for d in docs}, 300):
        return {"part": "reads", "note": "setup jobs not planned in 300 s"}
    targets = []
    for d in docs:
        job = requests.get(f"{base}/v1/jobs/{d['name']}", headers=HEADERS, timeout=60).json()
        for r in d["ranks"]:
            targets.append((str(d["name"]), str(r["host"]), int(job["version"])))
    rng.shuffle(targets)
    cpu = time.process_time()
    # The client's own cyclic collections (10,000 tasks and their frames alive) stalled its loop
    # up to ~250 ms, which counted in every latency it was late for: off while it measures.
    gc.collect()
    gc.disable()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            timed, errors, lag = runner.run(_reads(base, targets, rate, seconds, waiting))
    finally:
        gc.enable()
    cpu = time.process_time() - cpu
    served = _assignment_reads(base, workers)  # (the setup reads no assignments: all are the run's)
    ms = sorted(x * 1000 for _, x in timed)
    steady = sorted(x * 1000 for at, x in timed if at >= warmup_s)
    first = [x * 1000 for at, x in timed if at < warmup_s]
    return {"part": "reads", "rate": rate, "requests": len(ms), "errors": errors, "waiting_polls": waiting,
            "p50_ms": statistics.median(ms), "p99_ms": _pct(ms, 99), "max_ms": ms[-1],
            "warmup_s": warmup_s, "p99_after_warmup_ms": _pct(steady, 99),
            "max_after_warmup_ms": steady[-1] if steady else None,
            "max_in_warmup_ms": max(first) if first else None,
            "client_lag_ms": lag * 1000, "client_cpu_s": cpu,
            "from_database": served.get("database"), "from_cache": served.get("cache"),
            "workers_scraped": served["workers_scraped"]}


def run_tree(tree: Path, label: str, parts: list[str], args: dict[str, Any], workers: int,
             plan_processes: str = "") -> list[dict[str, object]]:
    out = []
    logdir = Path(f"/tmp/{args['prefix']}-load-{label}{plan_processes}")
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    env = {"C4_PLAN_PROCESSES": plan_processes} if plan_processes else {}
    for part in parts:
        fabric = PODS_FABRIC if part == "burst-pods" else FABRIC
        with postgres_database(str(args["prefix"])) as url, \
                controller(tree, url, workers, logdir / f"{part}.log", fabric, env) as base:
            t0 = time.monotonic()
            if part == "burst":
                row = burst(base, 400, float(args["burst_timeout"]), 1)
            elif part == "burst-pods":
                row = burst(base, 400, float(args["burst_timeout"]), 1, pods=int(PODS_FABRIC["pods"]),
                            channels=int(args["pod_job_channels"]))
            elif part.startswith("churn-"):
                row = churn(base, int(part.split("-")[1]), float(args["rate"]), float(args["churn_s"]),
                            float(args["setup_timeout"]), float(args["drain_timeout"]), 2)
            elif part == "reads":
                row = reads(base, float(args["read_rate"]), float(args["read_s"]), 128, 3,
                            float(args["read_warmup_s"]), workers)
            else:
                raise SystemExit(f"unknown part {part!r}")
            row = {"tree": label, **({"plan_processes": plan_processes} if plan_processes else {}), **row,
                   "part": part, "wall_s": time.monotonic() - t0}
        print(" ".join(f"{k}={_fmt(v)}" for k, v in row.items()), flush=True)
        out.append(row)
    return out


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v < 100 else f"{v:.0f}"
    return str(v)


def main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.load churn", description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="burst,churn-100,churn-1000,reads")
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                   help="also run against this source tree (e.g. main=/tmp/c4-main), side by side")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rate", type=float, default=30.0, help="churn: jobs posted (and deleted) per second")
    p.add_argument("--churn-s", type=float, default=20.0)
    p.add_argument("--read-rate", type=float, default=1000.0)
    p.add_argument("--read-s", type=float, default=10.0)
    p.add_argument("--read-warmup-s", type=float, default=1.0,
                   help="reads: the first seconds of the schedule, also reported apart (the cache fills)")
    p.add_argument("--burst-timeout", type=float, default=120.0)
    p.add_argument("--setup-timeout", type=float, default=300.0)
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--prefix", default=f"c4load{os.getpid()}")
    p.add_argument("--pod-job-channels", type=int, default=4,
                   help="burst-pods: channels per connection of its jobs (x 2 QPs x 4 connections: 32 flows)")
    p.add_argument("--plan-processes", default="",
                   help="C4_PLAN_PROCESSES for the controller; several, comma-separated: each part once per value")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up servers and databases
    trees = [("this", ROOT)] + [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in a.tree]
    parts = a.parts.split(",")
    settings = {k: v for k, v in vars(a).items()}
    for part in parts:
        for label, tree in trees:
            for n in a.plan_processes.split(","):
                run_tree(tree, label, [part], settings, a.workers, n.strip())
