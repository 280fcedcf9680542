"""`c4 simulate-hosts`: the demo's hosts as a process of their own, for deployments without
GPUs (docker-compose's `hosts` service): the demo fabric and jobs set up through the REST API
if the controller has none, then the C4D simulator's telemetry of the demo jobs (NCCL's
physics, `demo_traffic`) posted to /v1/telemetry/collectives as node agents post it, in real
time, with heartbeats. A record batch refused (503 while no replica leads, or the controller
restarting) is retried a few times and then dropped with a warning: a simulator has no spool.
Demo only."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import httpx

from controller.domain.telemetry import CollectiveRecord
from controller.services import demo, jobs
from controller.services.demo_traffic import DemoJob, DemoTraffic
from controller.services.telemetry import Telemetry
from controller.topology.document import to_document
from controller.topology.generate import leaf_spine

log = logging.getLogger(__name__)
RETRIES = 5


def record_document(rec: CollectiveRecord) -> dict[str, Any]:
    """API.md's collective record (per-flow progress left out, as `demo_traffic` does)."""
    return {"job": rec.job, "comm": rec.comm, "rank": rec.rank, "nranks": rec.nranks, "op": rec.op, "seq": rec.seq,
            "bytes": rec.bytes, "t_start_us": rec.t_start_us, "t_end_us": rec.t_end_us,
            "peers": [{"peer": p.peer, "dir": p.dir, "bytes": p.bytes, "t_first_us": p.t_first_us,
                       "t_last_us": p.t_last_us, "done": p.done, "net_us": p.net_us} for p in rec.peers]}


class HttpTelemetry:
    """What `DemoTraffic` needs of the telemetry service, over HTTP: each batch to the first
    controller that takes it (a replica that does not take telemetry answers 503)."""

    def __init__(self, clients: Sequence[httpx.Client]) -> None:
        self.clients = list(clients)

    def ingest(self, host: str, records: Sequence[CollectiveRecord]) -> int:
        body = {"host": host, "records": [record_document(r) for r in records]}
        for attempt in range(RETRIES):
            for client in self.clients:
                try:
                    r = client.post("/v1/telemetry/collectives", json=body)
                except httpx.HTTPError as exc:
                    log.warning("posting telemetry of %s to %s failed: %s", host, client.base_url, exc)
                    continue
                if r.status_code < 300:
                    return len(records)
                if r.status_code != 503:
                    log.warning("telemetry of %s refused: %s %s", host, r.status_code, r.text[:200])
                    return 0
            time.sleep(0.5 * (attempt + 1))
        log.warning("telemetry of %s dropped after %d tries", host, RETRIES)
        return 0


def set_up(client: httpx.Client) -> None:
    """The demo fabric and jobs, unless the controller has a fabric (then it is used as is)."""
    if client.get("/v1/topology").status_code == 404:
        r = client.put("/v1/topology", json=to_document(leaf_spine(demo.DEMO_FABRIC)))
        r.raise_for_status()
    for name, first, n in jobs.DEMO_JOBS:
        if client.get(f"/v1/jobs/{name}").status_code == 404:
            ranks = [{"rank": r, "host": f"host{first + r}", "nic": "mlx5_0"} for r in range(n)]
            doc = {"name": name, "ranks": ranks,
                   "traffic": [{"pattern": "ring", "ranks": list(range(n)), "channels": 2, "qps_per_connection": 2}]}
            r = client.post("/v1/jobs", json=doc)
            if r.status_code not in (202, 409):
                r.raise_for_status()


def run(urls: Sequence[str], token: str, setup: bool = True, stop: threading.Event | None = None) -> None:
    """Wait for the first controller, set the demo up, then post telemetry until `stop`."""
    stop = stop or threading.Event()
    headers = {"Authorization": f"Bearer {token}"}
    clients = [httpx.Client(base_url=u, headers=headers, timeout=30) for u in urls]
    try:
        while not stop.is_set():
            try:
                if clients[0].get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            stop.wait(1.0)
        if setup:
            set_up(clients[0])
        demo_jobs = [DemoJob(name, first, n, demo.DEMO_FAULT if i == 0 else None)
                     for i, (name, first, n) in enumerate(jobs.DEMO_JOBS)]
        traffic = DemoTraffic(cast(Telemetry, HttpTelemetry(clients)), demo_jobs, demo.DEMO_FABRIC.hosts_per_leaf)
        traffic.start()
        stop.wait()
        traffic.stop()
    finally:
        for c in clients:
            c.close()
