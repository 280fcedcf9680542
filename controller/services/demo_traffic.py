"""Live demo traffic for `c4 demo`: simulated NCCL telemetry of the demo jobs, in real time.

Each job's telemetry comes from the C4D simulator in five-minute chunks (a new communicator
id per chunk, as after a restart), delivered when its simulated arrival time comes. Only the
records of the job's own ring are sent (the simulator's `world` ring, in rank order, as the
demo jobs post it), so every connection an alarm names is one the plan has. The
first chunk of the first job injects a slow NIC port after 90 s so an operator sees a
`comm_slow` alarm open, the host isolated and its webhooks queued. Demo only: never used by
`c4 serve`.
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

CHUNK_S = 300.0
DEMO_COMM = "world"  # the simulator's ring in rank order (`simfabric.comm_layout`)
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

    def chunk(self, index: int, start_us: int) -> list[tuple[int, CollectiveRecord]]:
        """(arrival_us, record) of every job for one chunk, sorted by arrival."""
        out: list[tuple[int, CollectiveRecord]] = []
        for j, job in enumerate(self.jobs):
            faults = (job.fault,) if job.fault is not None and index == 0 else ()
            run = simulate(SimConfig(job=job.name, nranks=job.nranks, hosts_per_leaf=self.hosts_per_leaf,
                                     duration_s=CHUNK_S, start_us=start_us, seed=1000 * index + j + 1,
                                     faults=faults))
            for d in run.deliveries:
                rec = d.record
                # The demo job is one ring in rank order, which is the simulator's `world`
                # ring: its other communicators' records name connections the plan lacks.
                # Per-flow progress goes too: the simulator's source ports are not the plan's.
                if rec.comm != DEMO_COMM:
                    continue
                out.append((d.arrival_us, replace(rec, comm=f"{rec.comm}-{index}",
                                                  host=f"host{job.first_host + int(rec.host.removeprefix('host'))}",
                                                  peers=tuple(replace(p, flows=()) for p in rec.peers))))
        out.sort(key=lambda item: item[0])
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
                    rec = pending[i][1]
                    batch.setdefault(rec.host, []).append(rec)
                    i += 1
                for host, records in batch.items():
                    try:
                        self.sent += self.telemetry.ingest(host, records)
                    except ServiceError as exc:
                        log.warning("demo traffic refused: %s", exc.message)
                self._stop.wait(BATCH_EVERY_S)
            index += 1
            time.sleep(0)
