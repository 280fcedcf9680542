"""bench/load, the mixed part (issue 18 item 3): a controller on PostgreSQL under every kind of
client at once, with 1 and 2 replicas side by side:

- telemetry from 1,024 ranks (16 jobs x 64 ranks on 64 hosts, c4's own C4D simulator's records,
  packed as node agents post them; `bench.load telemetry`'s batches), as fast as the replicas
  take them, from `--clients` processes;
- switch samples from 64 switches (every switch of the fabric below, every port, counters
  growing at a steady rate; one POST per switch per `--switch-interval-s`, spread evenly, as
  the switch agent posts one poll of one switch per item);
- 128 node agents' assignment long-polls (`wait_s` `--poll-wait-s`, 5 s so that they cycle
  within the run, on the telemetry jobs' hosts, re-issued as each returns; they wait, so their
  count and errors are reported, not latencies);
- job churn: a 4-rank ring job POSTed every 1/`--churn-rate` s and DELETEd 10 s later, or when
  the run ends (the planner plans each one; planned ones are counted when they are DELETEd);
- an operator polling GET /v1/alarms and GET /v1/hosts.

The fabric: a leaf-spine of 32 leaves x 2 hosts and 32 spines (64 switches, one single-port NIC
per host). Printed per replica count: records/s accepted and detected, requests and p50/p99
per endpoint, long-polls held and answered, CPU seconds of the replicas and of PostgreSQL.

Run: `.venv/bin/python -m bench.load mix [--records N] [--replicas 1,2]`.
Physics: real HTTP (`c4 serve`, one uvicorn worker per replica), a real PostgreSQL (its own
throw-away server), c4's own planner and detectors; every client on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.load.telemetry import (
    CONTENT_TYPES,
    JOBS,
    RANKS,
    TOKEN,
    Postgres,
    Replica,
    _batches,
    _cpu_s,
    _detected,
    _pct,
    _post_worker,
    _ready,
    _reset,
    _setup,
    _start,
    _wait_owned,
)
from controller.services.clock import now_us
from controller.topology.generate import LeafSpineSpec, leaf_spine

SPEC = LeafSpineSpec(leaves=32, spines=32, hosts_per_leaf=2, ports_per_nic=1)
FABRIC = leaf_spine(SPEC)  # (the same generator `POST /v1/topology/generate` runs on FABRIC_DOC)
FABRIC_DOC = {"kind": "leaf-spine", "leaves": SPEC.leaves, "spines": SPEC.spines,
              "hosts_per_leaf": SPEC.hosts_per_leaf, "ports_per_nic": SPEC.ports_per_nic}
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
POLLERS = 128


def _switch_ports() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {s.name: [] for s in FABRIC.switches}
    for link in FABRIC.links:
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            if node in out and port:
                out[node].append(port)
    return {s: sorted(p) for s, p in out.items()}


@dataclass
class Mixed:
    replicas: int
    records: int
    accepted: int = 0
    post_s: float = 0.0
    detect_s: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, set[str]] = field(default_factory=dict)  # what the errors were
    polls_answered: int = 0
    polls_held: int = 0
    jobs_posted: int = 0
    jobs_planned: int = 0
    replica_cpu_s: float = 0.0
    pg_cpu_s: float = 0.0


class _Load:
    """The non-telemetry clients, on threads (one asyncio loop for the long-polls)."""

    def __init__(self, urls: list[str], result: Mixed, switch_interval_s: float, churn_rate: float,
                 poll_wait_s: float) -> None:
        self.urls = urls
        self.poll_wait_s = poll_wait_s
        self.result = result
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.switch_interval_s = switch_interval_s
        self.churn_rate = churn_rate
        self.threads = [threading.Thread(target=f, daemon=True) for f in
                        (self._switches, self._churn, self._operator, self._polls)]

    def _note(self, endpoint: str, dt: float, ok: bool, status: int | str = "") -> None:
        with self.lock:
            self.result.latencies.setdefault(endpoint, []).append(dt)
            if not ok:
                self.result.errors[endpoint] = self.result.errors.get(endpoint, 0) + 1
                self.result.statuses.setdefault(endpoint, set()).add(str(status))

    def _switches(self) -> None:
        ports = _switch_ports()
        names = sorted(ports)
        clients = [httpx.Client(base_url=u, headers=HEADERS, timeout=30) for u in self.urls]
        counters: dict[tuple[str, str], int] = {}
        step = self.switch_interval_s / len(names)
        i = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            sw = names[i % len(names)]
            t_us = now_us()
            items = []
            for p in ports[sw]:
                count = counters.get((sw, p), 0) + int(2.5e9 * self.switch_interval_s)  # ~20 Gbit/s per port
                counters[(sw, p)] = count
                items.append({"port": p, "tx_bytes": count, "rx_bytes": count, "tx_pkts": count // 4096,
                              "ecn_marked_pkts": 0, "pfc_rx_pause": {"3": 0}, "pfc_tx_pause": {"3": 0}})
            t0 = time.perf_counter()
            status: int | str
            try:
                r = clients[i % len(clients)].post("/v1/telemetry/switches",
                                                   json={"samples": [{"switch": sw, "t_us": t_us, "ports": items}]})
                status = r.status_code
                ok = status in (200, 202)
            except httpx.HTTPError as exc:
                ok, status = False, type(exc).__name__
            self._note("POST /v1/telemetry/switches", time.perf_counter() - t0, ok, status)
            i += 1
            next_at += step
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        for c in clients:
            c.close()

    def _churn(self) -> None:
        rng = random.Random(5)
        clients = [httpx.Client(base_url=u, headers=HEADERS, timeout=60) for u in self.urls]
        live: list[tuple[float, str]] = []
        n = 0
        next_at = time.monotonic()
        while True:
            now = time.monotonic()
            while live and (live[0][0] <= now or self.stop.is_set()):
                _, name = live.pop(0)
                t0 = time.perf_counter()
                try:
                    r = clients[n % len(clients)].get(f"/v1/jobs/{name}")
                    if r.status_code == 200 and r.json().get("status") == "planned":
                        self.result.jobs_planned += 1
                    r = clients[n % len(clients)].delete(f"/v1/jobs/{name}")
                    ok = r.status_code in (200, 202, 204)
                except httpx.HTTPError:
                    ok = False
                self._note("DELETE /v1/jobs/{name}", time.perf_counter() - t0, ok)
            if self.stop.is_set():
                break
            hosts = rng.sample(range(64), 4)
            name = f"churn-{n}"
            doc = {"name": name, "ranks": [{"rank": r, "host": f"host{h}", "nic": "mlx5_0"} for r, h in enumerate(hosts)],
                   "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3], "channels": 1, "qps_per_connection": 2}]}
            t0 = time.perf_counter()
            try:
                r = clients[n % len(clients)].post("/v1/jobs", json=doc)
                status: int | str = r.status_code
                ok = r.status_code in (200, 201, 202)
            except httpx.HTTPError as exc:
                ok, status = False, type(exc).__name__
            self._note("POST /v1/jobs", time.perf_counter() - t0, ok, status)
            if ok:
                live.append((time.monotonic() + 10.0, name))
                self.result.jobs_posted += 1
            n += 1
            next_at += 1.0 / self.churn_rate
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        for c in clients:
            c.close()

    def _operator(self) -> None:
        clients = [httpx.Client(base_url=u, headers=HEADERS, timeout=30) for u in self.urls]
        i = 0
        while not self.stop.is_set():
            for path in ("/v1/alarms", "/v1/hosts"):
                t0 = time.perf_counter()
                try:
                    ok = clients[i % len(clients)].get(path).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self._note(f"GET {path}", time.perf_counter() - t0, ok)
                i += 1
            self.stop.wait(0.1)
        for c in clients:
            c.close()

    def _polls(self) -> None:
        asyncio.run(self._poll_all())

    async def _poll_all(self) -> None:
        limits = httpx.Limits(max_connections=POLLERS + 8, max_keepalive_connections=POLLERS + 8)
        clients = [httpx.AsyncClient(base_url=u, headers=HEADERS, timeout=60, limits=limits) for u in self.urls]

        async def agent(k: int) -> None:
            job, host = f"load-{k % JOBS:02d}", f"host{(k * 7) % RANKS}"
            version = 1
            while not self.stop.is_set():
                with self.lock:
                    self.result.polls_held += 1
                try:
                    r = await clients[k % len(clients)].get(
                        f"/v1/jobs/{job}/assignments",
                        params={"host": host, "after_version": version, "wait_s": self.poll_wait_s})
                    ok = r.status_code in (200, 304)
                    if r.status_code == 200:
                        version = int(r.json().get("version", version))
                except httpx.HTTPError:
                    ok = False
                with self.lock:
                    self.result.polls_answered += 1
                    if not ok:
                        self.result.errors["GET assignments (long-poll)"] = \
                            self.result.errors.get("GET assignments (long-poll)", 0) + 1
                if not ok:
                    await asyncio.sleep(1.0)

        tasks = [asyncio.create_task(agent(k)) for k in range(POLLERS)]
        while not self.stop.is_set():
            await asyncio.sleep(0.2)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            await c.aclose()

    def __enter__(self) -> _Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def run_once(db_url: str, pg: Postgres, n_replicas: int, bodies: list[bytes], n_records: int, clients: int,
             threads: int, switch_interval_s: float, churn_rate: float, warm_s: float, poll_wait_s: float) -> Mixed:
    _reset(db_url)
    result = Mixed(n_replicas, n_records)
    with tempfile.TemporaryDirectory(prefix="c4-load-mix-") as tmp:
        replicas: list[Replica] = []
        try:
            for i in range(n_replicas):
                replicas.append(_start(db_url, Path(tmp), i))
                _ready(replicas[-1])
            _setup(db_url, replicas[0].url, FABRIC_DOC)
            _wait_owned(db_url, {r.pid for r in replicas}, 30)
            urls = [r.url for r in replicas]
            with _Load(urls, result, switch_interval_s, churn_rate, poll_wait_s):
                time.sleep(warm_s)  # the long-polls, switch samples and churn under way first
                before = sum(_detected(r) for r in replicas)
                cpu0 = sum(_cpu_s(r.pid) for r in replicas)
                pg0 = pg.cpu_s()
                ctx = multiprocessing.get_context("fork")
                queue = ctx.Queue()
                start = time.perf_counter()
                procs = [ctx.Process(target=_post_worker, args=(urls, bodies[k::clients], threads, queue,
                                                                CONTENT_TYPES["packed"])) for k in range(clients)]
                for p in procs:
                    p.start()
                got = [queue.get(timeout=900) for _ in procs]
                result.post_s = time.perf_counter() - start
                for p in procs:
                    p.join(30)
                result.accepted = sum(g[0] for g in got)
                deadline = time.monotonic() + 300
                while sum(_detected(r) for r in replicas) - before < result.accepted and time.monotonic() < deadline:
                    time.sleep(0.05)
                result.detect_s = time.perf_counter() - start
                result.replica_cpu_s = sum(_cpu_s(r.pid) for r in replicas) - cpu0
                result.pg_cpu_s = pg.cpu_s() - pg0
                result.latencies["POST /v1/telemetry/collectives"] = [x for g in got for x in g[1]]
                errors = sum(len(g[2]) for g in got)
                if errors:
                    result.errors["POST /v1/telemetry/collectives"] = errors
            return result
        finally:
            for r in replicas:
                if r.proc.poll() is None:
                    r.proc.terminate()
                    try:
                        r.proc.wait(30)
                    except subprocess.TimeoutExpired:
                        r.proc.kill()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load mix", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--switch-interval-s", type=float, default=10.0)
    parser.add_argument("--churn-rate", type=float, default=2.0, help="jobs POSTed per second (each DELETEd 10 s later)")
    parser.add_argument("--warm-s", type=float, default=5.0)
    parser.add_argument("--poll-wait-s", type=float, default=5.0,
                        help="the long-polls' wait_s (agents send 30; shorter here so that they cycle in the run)")
    args = parser.parse_args(argv)
    print(f"uptime before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    bodies = _batches(args.records, args.batch)["packed"]
    n_records = args.records
    print(f"~{n_records} records of {JOBS} jobs x {RANKS} ranks in {len(bodies)} packed batches; "
          f"{len(FABRIC.switches)} switches every {args.switch_interval_s} s; {POLLERS} long-polls; "
          f"churn {args.churn_rate} jobs/s", flush=True)
    results = []
    pg = Postgres()
    with pg as db_url:
        for n in (int(x) for x in args.replicas.split(",")):
            res = run_once(db_url, pg, n, bodies, n_records, args.clients, args.threads, args.switch_interval_s,
                           args.churn_rate, args.warm_s, args.poll_wait_s)
            results.append(res)
            print(f"  {n} replica(s): accepted {res.accepted / res.post_s:,.0f} records/s, detected "
                  f"{res.accepted / res.detect_s:,.0f} records/s; errors {res.errors} {res.statuses}", flush=True)
    _report(results)
    print(f"uptime after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    return 0


def _report(results: list[Mixed]) -> None:
    print("\n| replicas | telemetry accepted / detected records/s | replicas' CPU s | PostgreSQL CPU s | "
          "long-polls answered (of held) | churn jobs planned of posted |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r.replicas} | {r.accepted / r.post_s:,.0f} / {r.accepted / r.detect_s:,.0f} | "
              f"{r.replica_cpu_s:.1f} | {r.pg_cpu_s:.1f} | {r.polls_answered} (of {r.polls_held}) | "
              f"{r.jobs_planned} of {r.jobs_posted} |")
    print("\n| replicas | endpoint | requests | errors | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for r in results:
        for ep, xs in sorted(r.latencies.items()):
            what = f" ({', '.join(sorted(r.statuses[ep]))})" if ep in r.statuses else ""
            print(f"| {r.replicas} | {ep} | {len(xs)} | {r.errors.get(ep, 0)}{what} | {_pct(xs, 0.5):.1f} | "
                  f"{_pct(xs, 0.99):.1f} |")
        if "GET assignments (long-poll)" in r.errors:
            print(f"| {r.replicas} | GET assignments (long-poll) | {r.polls_answered} | "
                  f"{r.errors['GET assignments (long-poll)']} | - | - |")
