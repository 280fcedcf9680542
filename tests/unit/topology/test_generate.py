"""Generated fabrics are valid, dual-ToR, canonically named and have the expected paths."""

from __future__ import annotations

import pytest

from controller.domain.fabric import LinkState
from controller.topology.build import with_link_state
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine
from controller.topology.graph import FabricView
from controller.topology.names import link_name
from controller.topology.validate import problems


def test_leaf_spine_counts_and_dual_tor() -> None:
    f = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=3))
    assert problems(f) == []
    assert len(f.hosts) == 12
    assert sum(not link.is_host_link for link in f.links) == 8
    for host in f.hosts:
        p0, p1 = host.nics[0].ports
        assert p0.switch != p1.switch
        assert {int(p0.switch[-1]), int(p1.switch[-1])} in ({0, 1}, {2, 3})
    assert len({p.address for p in f.ports()}) == 24


def test_link_names_are_canonical() -> None:
    f = leaf_spine(LeafSpineSpec(leaves=2, spines=1, hosts_per_leaf=1))
    for link in f.links:
        assert link.name == link_name(link.a, link.a_port, link.b, link.b_port)
    assert "leaf0:Ethernet0--spine0:Ethernet0" in {link.name for link in f.links}
    assert "host0:mlx5_0:p0--leaf0:Ethernet1" in {link.name for link in f.links}


@pytest.mark.parametrize(("cores", "paths_across_pods"), [(8, 4 * 2), (6, 4 * 6 * 4)])
def test_clos3_paths(cores: int, paths_across_pods: int) -> None:
    f = clos3(Clos3Spec(pods=2, leaves_per_pod=2, spines_per_pod=4, cores=cores, hosts_per_leaf=1))
    assert problems(f) == []
    view = FabricView(f)
    # host0 sits on pod0-leaf0, host2 on pod1-leaf0. With planes (8 cores, 4 spines) spine j reaches
    # its 2 cores only; without (6 cores) every spine reaches every core and every far spine.
    across = view.equal_cost_paths("host0:mlx5_0:p0", "host2:mlx5_0:p0")
    assert len(across) == paths_across_pods
    assert all(len(p) == 7 for p in across)
    within = view.equal_cost_paths("host0:mlx5_0:p0", "host1:mlx5_0:p0")
    assert len(within) == 4


def test_a_down_link_removes_its_paths() -> None:
    f = leaf_spine(LeafSpineSpec(leaves=2, spines=4, hosts_per_leaf=1, ports_per_nic=1))
    before = FabricView(f).equal_cost_paths("host0:mlx5_0:p0", "host1:mlx5_0:p0")
    down = with_link_state(f, "leaf0:Ethernet2--spine2:Ethernet0", LinkState.DOWN)
    after = FabricView(down).equal_cost_paths("host0:mlx5_0:p0", "host1:mlx5_0:p0")
    assert len(before) == 4 and len(after) == 3
    assert all("spine2" not in p for p in after)


def test_odd_leaves_with_dual_port_nics_are_refused() -> None:
    with pytest.raises(ValueError, match="even"):
        leaf_spine(LeafSpineSpec(leaves=3))
