"""What real clusters need beyond the fault itself: announced pauses, silent agents, lost
records, host clock skew, per-job settings, RDMA hang evidence, and a link two jobs share."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.diagnosis.clocks import EPOCH_US, HostClocks
from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.replay import replay
from controller.diagnosis.simcases import shared_link
from controller.diagnosis.simfabric import Fault, SimFabric
from controller.diagnosis.simulator import AgentGap, Checkpoint, SimConfig, simulate
from controller.domain.alarms import AlarmKind, Suspect, SuspectKind
from controller.domain.jobs import JobDiagnosis
from controller.domain.telemetry import CollectiveRecord, PeerProgress

FAST = DiagnosisConfig(hang_timeout_s=10.0)
SMALL = SimConfig(nranks=16, hosts_per_leaf=4, spines=4, world_bytes=64 << 20, dp_bytes=16 << 20,
                  skew_us=2_000_000, loss_prob=0.01, duplicate_prob=0.02)
T0 = SMALL.start_us


def test_an_announced_checkpoint_raises_no_hang_and_an_unannounced_one_does() -> None:
    """Rank 0 saves a checkpoint for 20 s while the others wait in their next collective."""
    cfg = replace(SMALL, duration_s=32.0, checkpoints=(Checkpoint(5.0, 20.0),))
    run = simulate(cfg)
    assert run.pauses and replay(run, FAST, tail_us=3_000_000).events == ()
    unannounced = replay(run, FAST, announce_pauses=False).opened()
    assert [(e.alarm.kind, e.alarm.suspects[0]) for e in unannounced] == \
        [(AlarmKind.NONCOMM_HANG, Suspect(SuspectKind.HOST, "host0"))]


def test_a_stall_that_outlasts_its_announced_pause_counts_from_the_pause_end() -> None:
    cfg = replace(SMALL, duration_s=32.0, checkpoints=(Checkpoint(5.0, 25.0, announced_s=8.0),))
    run = simulate(cfg)
    (pause,) = run.pauses
    opened = replay(run, FAST).opened()
    assert [e.alarm.kind for e in opened] == [AlarmKind.NONCOMM_HANG]
    assert pause.until_us + 10_000_000 <= opened[0].at_us <= pause.until_us + 12_000_000


def test_a_silent_agent_is_a_telemetry_gap_not_a_hang_suspect() -> None:
    """Host 5's agent goes silent (records lost) while its rank and the job run on, then the
    rank really hangs: the ranks that did report show where, and host5 is named only as
    unknown, never as the suspect."""
    clean = simulate(replace(SMALL, duration_s=30.0,
                             agent_gaps=(AgentGap(5, 5.0, 30.0),)))
    assert replay(clean, FAST).events == ()
    hang = simulate(replace(SMALL, duration_s=24.0, faults=(Fault("noncomm_hang", 8.0, "5"),),
                            agent_gaps=(AgentGap(5, 5.0, 30.0),)))
    opened = replay(hang, FAST).opened()
    assert opened and all(Suspect(SuspectKind.HOST, "host5") not in e.alarm.suspects for e in opened)
    assert any(5 in e.alarm.evidence.get("telemetry_gap_ranks", []) for e in opened)  # type: ignore[operator]
    diagnoser = Diagnoser(FAST)
    replay(hang, FAST, diagnoser=diagnoser)
    gaps = {h.host: h.gap_since_us for h in diagnoser.hosts(hang.end_us)}
    assert gaps["host5"] is not None and gaps["host4"] is None


def test_a_dead_link_is_found_though_a_stalled_ranks_agent_went_silent() -> None:
    fault = Fault("comm_hang", 8.0, "leaf2:Ethernet3--spine3:Ethernet2")
    run = simulate(replace(SMALL, seed=1, duration_s=22.0, faults=(fault,),
                           agent_gaps=(AgentGap(10, 9.0, 60.0),)))
    opened = replay(run, FAST).opened()
    assert [(e.alarm.kind, e.alarm.suspects[0].name) for e in opened] == \
        [(AlarmKind.COMM_HANG, fault.target)]


def test_slow_detectors_work_on_the_ranks_that_reported() -> None:
    """Every record of host 3 is lost (its agent never reports): a slow NIC port elsewhere and
    a late rank are still found from the ranks that did report."""
    for fault, kind, host in ((Fault("slow_nic_port", 5.0, "host6:mlx5_0:p0"), AlarmKind.COMM_SLOW,
                               "host6:mlx5_0:p0"),
                              (Fault("noncomm_slow", 5.0, "6", factor=4.0), AlarmKind.NONCOMM_SLOW,
                               "host6")):
        run = simulate(replace(SMALL, duration_s=18.0, faults=(fault,),
                               agent_gaps=(AgentGap(3, 0.0, 100.0),)))
        opened = replay(run, FAST).opened()
        assert [(e.alarm.kind, e.alarm.suspects[0].name) for e in opened] == [(kind, host)]


def test_host_clock_offsets_come_from_finished_records_and_follow_a_stepped_clock() -> None:
    clocks = HostClocks()

    def finished(t_end_us: int, host: str = "h") -> CollectiveRecord:
        return CollectiveRecord("j", "c", 0, 2, "AllReduce", 0, 1, t_end_us - 5, t_end_us, (), host)

    clocks.observe(finished(T0 + 2_000_000), T0 + 300_000)  # host clock 2 s ahead, 0.3 s late
    clocks.observe(finished(T0 + 2_100_000), T0 + 101_000)
    assert clocks.to_controller_us("h", T0 + 2_100_000) == T0 + 101_000
    stale = replace(finished(T0), t_end_us=None)  # a hung rank's re-send: its stamps are old
    clocks.observe(stale, T0 + 20_000_000)
    assert clocks.to_controller_us("h", T0 + 2_100_000) == T0 + 101_000
    later = T0 + 3 * EPOCH_US
    clocks.observe(finished(later - 1_000), later)  # stepped: now 1 ms behind the controller
    clocks.observe(finished(later + EPOCH_US - 1_000), later + EPOCH_US)
    assert clocks.to_controller_us("h", later) == later + 1_000


def test_a_jobs_own_hang_timeout_and_slow_factor_apply_to_it_alone() -> None:
    fault = Fault("noncomm_hang", 5.0, "5")
    run = simulate(replace(SMALL, duration_s=18.0, faults=(fault,)))
    default = replay(run, FAST).opened()  # 10 s: opens at ~15 s
    diagnoser = Diagnoser(FAST)
    diagnoser.set_job_settings(run.config.job, JobDiagnosis(hang_timeout_s=4.0))
    own = replay(run, FAST, diagnoser=diagnoser).opened()
    assert own[0].at_us < default[0].at_us - 5_000_000
    assert own[0].at_us - (T0 + 5_000_000) <= 6_500_000
    slow = simulate(replace(SMALL, duration_s=15.0,
                            faults=(Fault("slow_nic_port", 5.0, "host6:mlx5_0:p0", factor=0.2),)))
    lenient = Diagnoser(FAST)
    lenient.set_job_settings(slow.config.job, JobDiagnosis(slow_factor=8.0))
    assert replay(slow, FAST, diagnoser=lenient).opened() == []  # 5x slower is not 8x
    assert len(replay(slow, FAST).opened()) == 1


def test_rdma_connections_not_done_and_short_of_their_share_are_the_stuck_ones() -> None:
    """Played as a reviewer did: RDMA completions, both ends of the dead link's connection
    report 0 bytes and not done, every other connection done; no `net_us`. The link is named,
    no host."""
    fabric = SimFabric(2, 2, 11, tuple(range(8)))
    ring = [(r, (r + 1) % 8) for r in range(8)]
    routes = fabric.routes("j", ring, 1)
    crossed: dict[str, set[tuple[int, int]]] = {}
    for conn, (flow,) in routes.connections.items():
        for link in flow.links:
            crossed.setdefault(link, set()).add(conn)
    stuck, link = next((c, lk) for c in ring for lk in routes.connections[c][0].links
                       if lk.startswith("leaf") and crossed[lk] == {c}
                       and sum(1 for x in routes.connections[c][0].links if crossed[x] == {c}) == 1)
    share, start = 64 << 20, T0
    records = []
    for rank in range(8):
        peers = []
        for src, dst in ring:
            if rank not in (src, dst):
                continue
            dead = (src, dst) == stuck
            other = dst if rank == src else src
            direction = "send" if rank == src else "recv"
            peers.append(PeerProgress(other, direction, 0 if dead else share,
                                      None if dead else start + 10, None if dead else start + 9_000,
                                      not dead))
        records.append(CollectiveRecord("j", "c", rank, 8, "AllReduce", 3, share, start, None,
                                        tuple(peers), fabric.host(rank)))
    diagnoser = Diagnoser(FAST)
    diagnoser.ingest(records, start + 20_000)
    (finding,) = diagnoser.findings({"j": routes}, start + 11_000_000)
    assert finding.kind == AlarmKind.COMM_HANG and finding.suspects[0] == Suspect(SuspectKind.LINK, link)
    assert finding.evidence["stuck_by"] == ["short_of_share"]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_link_slowing_two_jobs_is_named_first_in_both_where_one_job_alone_cannot_tell(seed: int) -> None:
    case = shared_link(replace(SMALL, nranks=8, hosts_per_leaf=4, spines=2, duration_s=14.0), seed)
    assert case is not None
    fault = Fault("slow_link", 5.0, case.link, case.direction, 0.2)
    runs = [simulate(cfg) for cfg in case.with_fault(fault)]
    alone = replay(runs[0], FAST).opened()
    assert [e.alarm.suspects[0].kind for e in alone] == [SuspectKind.NIC_PORT]
    together = replay(runs, FAST).opened()
    assert sorted((e.alarm.job, e.alarm.suspects[0].name) for e in together) == \
        [("job-a", case.link), ("job-b", case.link)]
    assert all(e.alarm.evidence["correlated_jobs"] for e in together)
