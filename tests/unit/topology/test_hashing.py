"""c4-ref-v1 against values computed by hand with `printf ... | sha256sum`."""

from __future__ import annotations

import pytest

from controller.domain.fabric import LinkState
from controller.topology.build import with_link_state
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_hash, ref_v1_path
from tests.unit.topology.fabrics import tiny_fabric


@pytest.mark.parametrize(
    ("seed", "src", "dst", "sport", "first_8_bytes_hex"),
    [
        # printf '11|10.0.0.2|10.0.1.2|17|50021|4791' | sha256sum -> f696b81876a120c8...
        (11, "10.0.0.2", "10.0.1.2", 50021, "f696b81876a120c8"),
        # printf '0|10.0.0.2|10.64.0.10|17|49152|4791' | sha256sum -> aac4bbd0407f7ade...
        (0, "10.0.0.2", "10.64.0.10", 49152, "aac4bbd0407f7ade"),
    ],
)
def test_hash_is_the_first_8_bytes_of_sha256_big_endian(seed: int, src: str, dst: str, sport: int,
                                                        first_8_bytes_hex: str) -> None:
    assert ref_v1_hash(seed, src, dst, sport) == int(first_8_bytes_hex, 16)


def test_path_indexes_the_sorted_next_hops_by_hash_mod_len() -> None:
    view = FabricView(tiny_fabric())
    # At leaf0 (seed 11) toward leaf1 the next hops are [spine0, spine1, spine2];
    # 0xf696b81876a120c8 % 3 == 2 (by hand), so the flow goes through spine2.
    assert view.next_hops("leaf0", "leaf1") == ("spine0", "spine1", "spine2")
    path = ref_v1_path(view, "host0:mlx5_0:p0", "host1:mlx5_0:p1", 50021)
    assert path == ("host0:mlx5_0:p0", "leaf0", "spine2", "leaf1", "host1:mlx5_0:p1")


def test_a_link_going_down_shrinks_the_next_hop_set_and_rehashes() -> None:
    fabric = tiny_fabric()
    down = with_link_state(fabric, "leaf0:Ethernet2--spine2:Ethernet0", LinkState.DOWN)
    view = FabricView(down)
    assert view.next_hops("leaf0", "leaf1") == ("spine0", "spine1")
    # 0xf696b81876a120c8 is even: with two next hops the flow takes spine0.
    path = ref_v1_path(view, "host0:mlx5_0:p0", "host1:mlx5_0:p1", 50021)
    assert path == ("host0:mlx5_0:p0", "leaf0", "spine0", "leaf1", "host1:mlx5_0:p1")


def test_same_leaf_flows_do_not_leave_the_leaf() -> None:
    view = FabricView(tiny_fabric())
    assert ref_v1_path(view, "host0:mlx5_0:p0", "host1:mlx5_0:p0", 49152) == (
        "host0:mlx5_0:p0", "leaf0", "host1:mlx5_0:p0")


def test_a_port_whose_link_is_down_has_no_path() -> None:
    fabric = with_link_state(tiny_fabric(), "host1:mlx5_0:p1--leaf1:Ethernet33", LinkState.DOWN)
    view = FabricView(fabric)
    assert ref_v1_path(view, "host0:mlx5_0:p0", "host1:mlx5_0:p1", 50021) is None
    assert view.equal_cost_paths("host0:mlx5_0:p0", "host1:mlx5_0:p1") == []
