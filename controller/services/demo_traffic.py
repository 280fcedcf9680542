"""Live demo traffic for `c4 demo`: simulated NCCL telemetry of the demo jobs, in real time.

Each job's telemetry comes from the C4D simulator (NCCL's physics: one ring, as the demo jobs'
spec says, RDMA completions, `net_us` per peer and per flow) in one-minute chunks (a new
communicator id per chunk, as after a restart; a minute of two 16-rank jobs simulates in a
few CPU seconds, and the first chunk is shorter, so telemetry flows soon after start; each
chunk's last collectives are reported to their end, so no stale in-flight record is left), delivered when its simulated arrival
time comes, with the agents' heartbeats. The first job's fault (a slow NIC port 90 s in)
lasts until the fifth minute, so an operator sees a `comm_slow` alarm open, the host
isolated and its webhooks queued, then the alarm resolve. Demo only: never used by
`c4 serve`.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import SimConfig, simulate
from controller.domain.telemetry import CollectiveRecord
from controller.services.clock import now_us
from controller.services.errors import ServiceError
from controller.services.telemetry import Telemetry

log = logging.getLogger(__name__)

CHUNK_S = 60.0
FIRST_CHUNK_S = 20.0  # short, so telemetry flows a few seconds after start
FAULT_UNTIL_S = 300.0  # the demo fault heals then (the alarm resolves a quiet window later)
BATCH_EVERY_S = 0.5


@dataclass(frozen=True, slots=True)
class DemoJob:
    name: str
    first_host: int  # job rank r runs on host{first_host + r}
    nranks: int
    fault: Fault | None = None


def _span(index: int) -> tuple[float, float]:
    """Chunk `index`'s [begin, end) in seconds since the demo started."""
    if index == 0:
        return 0.0, FIRST_CHUNK_S
    return FIRST_CHUNK_S + (index - 1) * CHUNK_S, FIRST_CHUNK_S + index * CHUNK_S


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
            begin, end = _span(index)
            run = simulate(SimConfig(job=job.name, nranks=job.nranks, hosts_per_leaf=self.hosts_per_leaf,
                                     duration_s=end - begin, start_us=start_us, seed=1000 * index + j + 1,
                                     workload="ring", world_bytes=64 << 20, drain=True,
                                     placement=tuple(job.first_host + r for r in range(job.nranks)),
                                     faults=self._faults(job, index)))
            # Per-flow progress is left out: the simulator's source ports are not the plan's
            # (each peer's own `net_us` stays).
            out.extend((d.arrival_us, d.record.host,
                        replace(d.record, comm=f"{d.record.comm}-{index}",
                                peers=tuple(replace(p, flows=()) for p in d.record.peers)))
                       for d in run.deliveries)
            out.extend((at_us, host, None) for at_us, host in run.heartbeats)
        out.sort(key=lambda item: (item[0], item[1]))
        return out

    @staticmethod
    def _faults(job: DemoJob, index: int) -> tuple[Fault, ...]:
        """The job's fault as it stands in chunk `index` (times relative to the chunk)."""
        fault = job.fault
        begin, end = _span(index)
        if fault is None or fault.onset_s >= end or begin >= FAULT_UNTIL_S:
            return ()
        return (replace(fault, onset_s=max(0.0, fault.onset_s - begin),
                        end_s=min(FAULT_UNTIL_S, end) - begin),)

    def _run(self) -> None:
        """Deliver chunk after chunk on one contiguous timeline; the next chunk is simulated
        while the current one is delivered, so telemetry never pauses between chunks."""
        simulator = ThreadPoolExecutor(1, thread_name_prefix="c4-demo-sim")
        try:
            index, start = 0, now_us()
            ahead = simulator.submit(self.chunk, index, start)
            while not self._stop.is_set():
                pending = ahead.result()
                begin, end = _span(index)
                index, start = index + 1, start + int((end - begin) * 1_000_000)
                ahead = simulator.submit(self.chunk, index, start)
                self._deliver(pending)
        finally:
            simulator.shutdown(wait=False, cancel_futures=True)

    def _deliver(self, pending: list[tuple[int, str, CollectiveRecord | None]]) -> None:
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
