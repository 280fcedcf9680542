"""Live demo traffic for `c4 demo`: simulated NCCL telemetry of the demo jobs, in real time.

Each job's telemetry comes from the C4D simulator (NCCL's physics: one ring, as the demo jobs'
spec says, RDMA completions, `net_us` per peer and per flow) in two-and-a-half-minute chunks
(a new communicator id per chunk, as after a restart), delivered when its simulated arrival
time comes, with the agents' heartbeats. The first chunk of the first job injects a slow NIC
port after 90 s so an operator sees a `comm_slow` alarm open, the host isolated and its
webhooks queued. Demo only: never used by `c4 serve`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import SimConfig, simulate
from controller.domain.telemetry import CollectiveRecord
from controller.services.clock import now_us
from controller.services.errors import ServiceError
from controller.services.telemetry import Telemetry

log = logging.getLogger(__name__)

CHUNK_S = 150.0
BATCH_EVERY_S = 0.5


@dataclass(frozen=True, slots=True)
class DemoJob:
    name: str
    first_host: int  # job rank r runs on host{first_host + r}
    nranks: int
    fault: Fault | None = None


class DemoTraffic:
    def __init__(self, telemetry: Telemetry, jobs: list[DemoJob], hosts_per_leaf: int) -> None:
        self.telemetry = telemetry
        self.jobs = jobs
        self.hosts_per_leaf = hosts_per_leaf
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="c4-demo-traffic", daemon=True)
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def chunk(self, index: int, start_us: int) -> list[tuple[int, str, CollectiveRecord | None]]:
        """(arrival_us, host, record or None for a heartbeat) of every job for one chunk,
        sorted by arrival."""
        out: list[tuple[int, str, CollectiveRecord | None]] = []
        for j, job in enumerate(self.jobs):
            faults = (job.fault,) if job.fault is not None and index == 0 else ()
            run = simulate(SimConfig(job=job.name, nranks=job.nranks, hosts_per_leaf=self.hosts_per_leaf,
                                     duration_s=CHUNK_S, start_us=start_us, seed=1000 * index + j + 1,
                                     workload="ring", placement=tuple(job.first_host + r for r in range(job.nranks)),
                                     faults=faults))
            out.extend((d.arrival_us, d.record.host, replace(d.record, comm=f"{d.record.comm}-{index}"))
                       for d in run.deliveries)
            out.extend((at_us, host, None) for at_us, host in run.heartbeats)
        out.sort(key=lambda item: (item[0], item[1]))
        return out

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            start = now_us()
            pending = self.chunk(index, start)
            i = 0
            while i < len(pending) and not self._stop.is_set():
                now = now_us()
                batch: dict[str, list[CollectiveRecord]] = {}
                while i < len(pending) and pending[i][0] <= now:
                    _, host, rec = pending[i]
                    records = batch.setdefault(host, [])
                    if rec is not None:
                        records.append(rec)
                    i += 1
                for host, records in batch.items():
                    try:
                        self.sent += self.telemetry.ingest(host, records)
                    except ServiceError as exc:
                        log.warning("demo traffic refused: %s", exc.message)
                self._stop.wait(BATCH_EVERY_S)
            index += 1
            time.sleep(0)
