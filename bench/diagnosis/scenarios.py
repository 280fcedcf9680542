"""Fault cases for the diagnosis benchmark, drawn per seed on the simulator's fabric.

Targets are drawn among elements that carry traffic (a fault on an idle link shows nothing,
and no detector could see it). Pure; seeded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from controller.diagnosis.simfabric import Fault, build_routes, comm_layout, port_name
from controller.diagnosis.simulator import SimConfig


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    fault: Fault
    duration_s: float


def base_config(seed: int, duration_s: float, faults: tuple[Fault, ...] = ()) -> SimConfig:
    """64 ranks on 8 leaves x 8 hosts, 4 spines, 2 channels, ±10% jitter, ±50 ms host clock
    skew, one-off 3x stragglers in 0.2% of (rank, collective), 2% duplicated deliveries."""
    return SimConfig(nranks=64, hosts_per_leaf=8, spines=4, channels=2, jitter=0.10,
                     skew_us=50_000, straggler_prob=0.002, straggler_factor=3.0,
                     duplicate_prob=0.02, seed=seed, duration_s=duration_s, faults=faults)


def _used_fabric_links(cfg: SimConfig) -> list[tuple[str, str]]:
    comms = comm_layout(cfg.nranks, cfg.hosts_per_leaf, cfg.seed)
    routes = build_routes(cfg.job, cfg.nranks, cfg.hosts_per_leaf, cfg.spines, cfg.channels,
                          comms, cfg.seed)
    used = {
        (link, direction)
        for flows in routes.connections.values() for f in flows
        for link, direction in f.directed_links() if link.startswith("leaf")
    }
    return sorted(used)


def cases(seed: int, onset_s: float, hang_timeout_s: float) -> list[Case]:
    rng = random.Random(seed * 7919)
    cfg = base_config(seed, 1.0)
    rank = rng.randrange(cfg.nranks)
    port_rank = rng.randrange(cfg.nranks)
    slow_link, slow_dir = rng.choice(_used_fabric_links(cfg))
    dead_link, _ = rng.choice(_used_fabric_links(cfg))
    hang_s = onset_s + hang_timeout_s + 6
    slow_s = onset_s + 15
    return [
        Case("comm_hang (dead link)", Fault("comm_hang", onset_s, dead_link, factor=0.0), hang_s),
        Case("comm_hang (dead NIC port)",
             Fault("comm_hang", onset_s, port_name(port_rank), factor=0.0), hang_s),
        Case("noncomm_hang (rank stuck)", Fault("noncomm_hang", onset_s, str(rank)), hang_s),
        Case("comm_slow (NIC port 0.2x)", Fault("slow_nic_port", onset_s, port_name(port_rank)),
             slow_s),
        Case("comm_slow (shared link 0.2x)",
             Fault("slow_link", onset_s, slow_link, slow_dir), slow_s),
        Case("noncomm_slow (compute 4x)", Fault("noncomm_slow", onset_s, str(rank), factor=4.0),
             slow_s),
        Case("one-off straggler (no alarm)", Fault("straggler", onset_s, str(rank)), slow_s),
    ]
