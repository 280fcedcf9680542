"""Windows are bounded, records replace by identity, late and duplicate records are harmless."""

from __future__ import annotations

import random

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.replay import replay
from controller.diagnosis.simulator import SimConfig, simulate
from controller.diagnosis.window import WindowStore
from controller.domain.telemetry import CollectiveRecord, PeerProgress

T0_US = 1_764_430_000_000_000


def _record(seq: int, rank: int, done: bool, moved: int = 1 << 20, comm: str = "c0",
            nranks: int = 4) -> CollectiveRecord:
    start = T0_US + seq * 100_000
    peer = PeerProgress((rank + 1) % nranks, "send", moved, start + 10, start + 5_000, done)
    return CollectiveRecord("job", comm, rank, nranks, "AllReduce", seq, 1 << 22, start,
                            start + 6_000 if done else None, (peer,), f"host{rank}")


def test_later_record_replaces_in_flight_one_and_stale_resend_changes_nothing() -> None:
    store = WindowStore(window_collectives=8, max_comms_per_job=4)
    assert store.put(_record(0, 0, done=False, moved=10), T0_US)
    assert store.put(_record(0, 0, done=True), T0_US)
    assert not store.put(_record(0, 0, done=False, moved=10), T0_US)  # late re-send
    assert not store.put(_record(0, 0, done=True), T0_US)  # duplicate
    (window,) = store.windows("job")
    assert window.seqs[0][0].t_end_us is not None
    assert store.record_count() == 1


def test_memory_is_bounded_after_100k_collectives() -> None:
    config = DiagnosisConfig(window_collectives=16, max_comms_per_job=3)
    diagnoser = Diagnoser(config)
    for seq in range(100_000):
        comm = f"c{seq % 5}"
        diagnoser.ingest([_record(seq, r, done=True, comm=comm) for r in range(4)],
                         T0_US + seq * 100_000)
        if seq % 10_000 == 0:
            diagnoser.evaluate({}, T0_US + seq * 100_000)
    assert diagnoser.record_count() <= 3 * 16 * 4
    assert diagnoser.open_alarms() == ()


def test_records_older_than_the_window_are_ignored() -> None:
    store = WindowStore(window_collectives=4, max_comms_per_job=4)
    for seq in range(10, 14):
        store.put(_record(seq, 0, done=True), T0_US)
    assert not store.put(_record(3, 0, done=True), T0_US)
    assert sorted(store.windows("job")[0].seqs) == [10, 11, 12, 13]


def test_idle_comms_expire_and_forget_job_drops_everything() -> None:
    diagnoser = Diagnoser(DiagnosisConfig(comm_idle_expiry_s=10.0))
    diagnoser.ingest([_record(0, r, done=True) for r in range(4)], T0_US)
    diagnoser.evaluate({}, T0_US + 11_000_000)
    assert diagnoser.record_count() == 0
    diagnoser.ingest([_record(1, r, done=True) for r in range(4)], T0_US)
    assert diagnoser.forget_job("job", T0_US) == []
    assert diagnoser.record_count() == 0


def test_shuffled_and_duplicated_delivery_gives_the_same_alarms() -> None:
    from controller.diagnosis.simfabric import Fault

    fault = Fault("slow_nic_port", 5.0, "host6:mlx5_0:p0")
    base = SimConfig(nranks=16, hosts_per_leaf=4, spines=4, duration_s=15.0, faults=(fault,))
    run = simulate(base)
    config = DiagnosisConfig()
    first = Diagnoser(config)
    first.ingest((d.record for d in run.deliveries), run.end_us)
    records = [d.record for d in run.deliveries] * 2
    random.Random(7).shuffle(records)
    second = Diagnoser(config)
    second.ingest(records, run.end_us)
    routes = {run.routes.job: run.routes}
    assert first.findings(routes, run.end_us) == second.findings(routes, run.end_us)
    assert len(replay(run, config).opened()) == 1
