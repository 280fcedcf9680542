"""Flow derivation and the spec rules (each bad input names its field)."""

from __future__ import annotations

import pytest

from controller.domain.jobs import FlowKey, JobSpec, Pattern, RankSpec, TrafficSpec
from controller.te.flows import derive_flows, problems
from controller.topology.generate import LeafSpineSpec, leaf_spine

FABRIC = leaf_spine(LeafSpineSpec(leaves=2, spines=2, hosts_per_leaf=2))
RANKS = tuple(RankSpec(i, f"host{i}", "mlx5_0") for i in range(4))


def spec(*traffic: TrafficSpec, ranks: tuple[RankSpec, ...] = RANKS) -> JobSpec:
    return JobSpec("j", ranks, traffic)


def test_ring_pairs_alltoall_counts() -> None:
    assert len(derive_flows(spec(TrafficSpec(Pattern.RING, (0, 1, 2, 3), channels=2, qps_per_connection=2)))) == 16
    assert len(derive_flows(spec(TrafficSpec(Pattern.PAIRS, pairs=((0, 2), (1, 3)))))) == 2
    assert len(derive_flows(spec(TrafficSpec(Pattern.ALLTOALL)))) == 12
    assert len(derive_flows(spec(TrafficSpec(Pattern.ALLTOALL, ranks=(0, 1, 2), qps_per_connection=3)))) == 18


def test_same_host_connections_give_no_flows() -> None:
    ranks = (RankSpec(0, "host0", "mlx5_0"), RankSpec(1, "host0", "mlx5_0"), RankSpec(2, "host1", "mlx5_0"))
    keys = [f.key for f in derive_flows(spec(TrafficSpec(Pattern.RING, (0, 1, 2)), ranks=ranks))]
    assert keys == [FlowKey(1, 2, 0, 0), FlowKey(2, 0, 0, 0)]


def test_duplicate_connections_merge_and_weights_follow() -> None:
    fl = derive_flows(spec(TrafficSpec(Pattern.RING, (0, 1), channels=1, qps_per_connection=2), TrafficSpec(Pattern.PAIRS, pairs=((0, 1),), channels=2)))
    zero_one = [f for f in fl if (f.key.src_rank, f.key.dst_rank) == (0, 1)]
    assert len(zero_one) == 3 and {f.flows_in_connection for f in zero_one} == {3}


@pytest.mark.parametrize(("bad", "field"), [
    (spec(TrafficSpec(Pattern.RING, (0, 1))), None),
    (spec(TrafficSpec(Pattern.RING, (0,))), "traffic[0].ranks"),
    (spec(TrafficSpec(Pattern.RING, (0, 9))), "traffic[0].ranks[1]"),
    (spec(TrafficSpec(Pattern.RING, (0, 1), channels=0)), "traffic[0].channels"),
    (spec(TrafficSpec(Pattern.RING, (0, 1), qps_per_connection=0)), "traffic[0].qps_per_connection"),
    (spec(TrafficSpec(Pattern.PAIRS, pairs=((0, 7),))), "traffic[0].pairs[0][1]"),
    (spec(TrafficSpec(Pattern.RING, (0, 1)), ranks=(RankSpec(0, "nohost", "mlx5_0"), RankSpec(1, "host1", "mlx5_0"))),
     "ranks[0].host"),
    (spec(TrafficSpec(Pattern.RING, (0, 1)), ranks=(RankSpec(0, "host0", "mlx5_9"), RankSpec(1, "host1", "mlx5_0"))),
     "ranks[0].nic"),
    (spec(TrafficSpec(Pattern.RING, (0, 1)), ranks=(RankSpec(0, "host0", "mlx5_0"), RankSpec(0, "host1", "mlx5_0"))),
     "ranks[1].rank"),
])
def test_problems_name_the_field(bad: JobSpec, field: str | None) -> None:
    found = [p.field for p in problems(bad, FABRIC)]
    assert found == ([] if field is None else [field]) or field in found
