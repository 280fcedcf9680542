"""Fault and clean cases for the diagnosis benchmark, drawn per seed on the simulator's fabric.

Physics: c4's own simulator (`controller.diagnosis.simulator`, chunk-level NCCL physics of
`simphysics`), never the testbed. Targets are drawn among elements that carry traffic (a fault
on an idle link shows nothing, and no detector could see it). Pure; seeded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from controller.diagnosis.simcases import shared_link
from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import AgentGap, Checkpoint, SimConfig, comm_connections, layout


@dataclass(frozen=True, slots=True)
class Case:
    """One run: one or more jobs (several share a fabric) and the fault every job sees."""

    label: str
    fault: Fault
    jobs: tuple[SimConfig, ...]
    expect_jobs: tuple[str, ...] = field(default=())  # jobs that must alarm (all if empty)


def base_config(seed: int, duration_s: float, faults: tuple[Fault, ...] = (), **knobs: object) -> SimConfig:
    """64 ranks on 8 leaves x 8 hosts, 4 spines, 2 channels (one flow each), AllReduce of
    256 MiB (world rings) and 64 MiB (data-parallel rings), ±10% jitter, ±2 s host clock
    skew, one-off 3x stragglers in 0.2% of (rank, collective), 1% of records lost, 2%
    duplicated; RDMA completions, 4 slots of 1 MiB per connection."""
    cfg = SimConfig(nranks=64, hosts_per_leaf=8, spines=4, channels=2, jitter=0.10,
                    skew_us=2_000_000, straggler_prob=0.002, straggler_factor=3.0,
                    duplicate_prob=0.02, loss_prob=0.01, seed=seed, duration_s=duration_s,
                    faults=faults)
    return replace(cfg, **knobs)  # type: ignore[arg-type]


def _used_fabric_links(cfg: SimConfig) -> list[tuple[str, str]]:
    comms, _ = layout(cfg)
    conns = [c for comm in comms.values() for c in comm_connections(comm)]
    routes = cfg.fabric().routes(cfg.job, conns, cfg.channels)
    used = {
        (link, direction)
        for flows in routes.connections.values() for f in flows
        for link, direction in f.directed_links() if link.startswith("leaf")
    }
    return sorted(used)


def cases(seed: int, onset_s: float, hang_timeout_s: float, **knobs: object) -> list[Case]:
    rng = random.Random(seed * 7919)
    cfg = base_config(seed, 1.0, **knobs)
    rank = rng.randrange(cfg.nranks)
    port_host = rng.randrange(cfg.nranks)
    port = cfg.fabric().port(port_host)
    slow_link, slow_dir = rng.choice(_used_fabric_links(cfg))
    dead_link, _ = rng.choice(_used_fabric_links(cfg))
    hang_s = onset_s + hang_timeout_s + 5
    slow_s = onset_s + 15

    def one(label: str, fault: Fault, duration_s: float) -> Case:
        return Case(label, fault, (base_config(seed, duration_s, (fault,), **knobs),))

    out = [
        one("slow NIC port in a ring (0.2x)", Fault("slow_nic_port", onset_s, port), slow_s),
        one("slow link in a ring (0.2x)", Fault("slow_link", onset_s, slow_link, slow_dir), slow_s),
    ]
    pair = shared_link(base_config(seed, slow_s, nranks=16, **knobs), seed)
    if pair is not None:
        fault = Fault("slow_link", onset_s, pair.link, pair.direction)
        out.append(Case("slow link shared by two jobs (0.2x)", fault, pair.with_fault(fault)))
    out += [
        one("dead link (RDMA)", Fault("comm_hang", onset_s, dead_link, factor=0.0), hang_s),
        one("dead NIC port", Fault("comm_hang", onset_s, port, factor=0.0), hang_s),
        one("rank hung", Fault("noncomm_hang", onset_s, str(rank)), hang_s),
        one("rank slow (compute 4x)", Fault("noncomm_slow", onset_s, str(rank), factor=4.0), slow_s),
        one("one-off straggler (no alarm)", Fault("straggler", onset_s, str(rank)), slow_s),
    ]
    return out


def clean_cases(seed: int, duration_s: float) -> list[tuple[str, SimConfig]]:
    """Healthy runs, each with ±2 s host clock skew and one more thing real clusters do."""
    gap_rank = random.Random(seed).randrange(64)
    return [
        ("rings", base_config(seed, duration_s)),
        ("mixed sizes interleaved", base_config(seed, duration_s, workload="mixed")),
        ("MoE alltoall ±50% per peer", base_config(seed, duration_s, workload="moe")),
        ("pipeline-parallel sends", base_config(seed, duration_s, workload="pp")),
        ("30 s telemetry gap, records lost",
         base_config(seed, duration_s, agent_gaps=(AgentGap(gap_rank, 20.0, 30.0),))),
        ("30 s telemetry gap, records late",
         base_config(seed, duration_s, agent_gaps=(AgentGap(gap_rank, 20.0, 30.0, True),))),
        ("60 s checkpoint, announced",
         base_config(seed, max(duration_s, 100.0), checkpoints=(Checkpoint(20.0, 60.0),))),
    ]
