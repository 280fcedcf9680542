"""A scenario family whose expectations come from the physics and API.md, not from what the
detectors answer: a fault multiplies the rate of every flow through its element by `factor`,
so by API.md's definition ("this many times slower than its peers' median is slow") it must
be reported, naming that element first, when 1/factor is well above `slow_factor`, and must
not be when 1/factor is well below it. The family varies what the detectors were not tuned
on: completion semantics, slots and chunk size, clock skew, lost records, workloads.

Socket semantics whose transport ends a chunk's time on the network at its write
(`socket_net_us="write"`) measure only waits for buffer room: where a host copies faster than
its link runs, the bottleneck of a ring reads as far slower than it is. That is a property of
such a transport, recorded by the last test, not hidden: a transport that counts until the
peer acknowledged (`"acked"`) behaves like RDMA.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.replay import replay
from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simphysics import Physics
from controller.diagnosis.simulator import SimConfig, simulate

CONFIG = DiagnosisConfig()
BASE = SimConfig(nranks=16, hosts_per_leaf=4, spines=4, world_bytes=64 << 20, dp_bytes=16 << 20,
                 skew_us=2_000_000, duration_s=13.0)
PORT = "host6:mlx5_0:p0"
LINK = "leaf2:Ethernet3--spine3:Ethernet2"  # carries world-b and dp traffic at seed 1
MARGIN = 1.5  # stay clear of the threshold itself: the family asserts the physics, not a knife edge

VARIANTS = {
    "rdma": {},
    "socket-write": {"physics": Physics(completion="socket")},  # copy slower than the link
    "socket-acked-fast-copy": {"physics": Physics(completion="socket", socket_net_us="acked",
                                                  copy_rate_bytes_per_us=40_000.0)},
    "rdma-8-slots-512KiB": {"physics": Physics(slots=8, chunk_bytes=1 << 19)},
    "rdma-2-slots-4MiB": {"physics": Physics(slots=2, chunk_bytes=4 << 20)},
    "rdma-lossy-moe": {"workload": "moe", "loss_prob": 0.05},
}
FAMILY = [(variant, kind, factor) for variant in VARIANTS
          for kind in ("slow_nic_port", "slow_link") for factor in (0.15, 0.6)]


def expected(factor: float) -> bool:
    """Physics + API.md: report iff the element is clearly slow_factor times slower."""
    if 1 / factor >= CONFIG.slow_factor * MARGIN:
        return True
    assert 1 / factor <= CONFIG.slow_factor / MARGIN, "a factor too near the threshold"
    return False


@pytest.mark.parametrize(("variant", "kind", "factor"), FAMILY,
                         ids=[f"{v}-{k}-{f}" for v, k, f in FAMILY])
def test_a_slow_element_is_reported_exactly_when_the_physics_says_it_is_slow(
        variant: str, kind: str, factor: float) -> None:
    target, direction = (PORT, "") if kind == "slow_nic_port" else (LINK, "ab")
    fault = Fault(kind, 5.0, target, direction, factor)  # type: ignore[arg-type]
    run = simulate(replace(BASE, seed=1, faults=(fault,), **VARIANTS[variant]))  # type: ignore[arg-type]
    opened = replay(run, CONFIG).opened()
    if not expected(factor):
        assert opened == [], [e.alarm.evidence["summary"] for e in opened]
        return
    assert len(opened) == 1, [e.alarm.evidence["summary"] for e in opened]
    assert opened[0].alarm.suspects[0].name == target, opened[0].alarm.evidence["summary"]


def test_socket_write_completions_overstate_a_ring_bottleneck_when_copies_outrun_the_link() -> None:
    """The known limit of `socket_net_us="write"`: healthy connections' writes complete at
    copy speed, so a link at 0.6 of its peers (not slow by API.md) is reported."""
    fault = Fault("slow_link", 5.0, LINK, "ab", 0.6)
    fast = Physics(completion="socket", copy_rate_bytes_per_us=40_000.0)
    write = replay(simulate(replace(BASE, seed=1, faults=(fault,), physics=fast)), CONFIG).opened()
    acked = replay(simulate(replace(BASE, seed=1, faults=(fault,),
                                    physics=replace(fast, socket_net_us="acked"))), CONFIG).opened()
    assert [e.alarm.suspects[0].name for e in write] == [LINK] and acked == []
