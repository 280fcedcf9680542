"""Candidate routes: every equal-cost path gets a source port that the reference hash agrees with."""

from __future__ import annotations

import pytest

from controller.domain.fabric import LinkState
from controller.te.candidates import for_fabric
from controller.topology.build import with_link_state
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine
from controller.topology.hashing import ref_v1_path

FABRICS = {
    "leaf-spine": leaf_spine(LeafSpineSpec(leaves=4, spines=4, hosts_per_leaf=2)),
    "clos3": clos3(Clos3Spec(pods=2, leaves_per_pod=2, spines_per_pod=2, cores=4, hosts_per_leaf=1)),
}


@pytest.mark.parametrize("kind", sorted(FABRICS))
def test_every_path_has_a_port_that_the_reference_hash_agrees_with(kind: str) -> None:
    fabric = FABRICS[kind]
    cands = for_fabric(fabric)
    nics = sorted((h.name, n.name) for h in fabric.hosts for n in h.nics)
    for src in nics[:3]:
        for dst in nics[-3:]:
            if src == dst:
                continue
            routes = cands.nic_routes(src, dst)
            by_ports: dict[tuple[str, str], set[tuple[str, ...]]] = {}
            for r in routes:
                assert ref_v1_path(cands.view, r.src_node, r.dst_node, r.sport) == r.path
                assert r.links == cands.view.links_of(r.path)
                by_ports.setdefault((r.src_node, r.dst_node), set()).add(r.path)
            for (s, d), paths in by_ports.items():
                assert paths == set(cands.view.equal_cost_paths(s, d))
            assert len(by_ports) == 4  # dual-port NICs: 2 x 2 port combinations


def test_sampling_is_deterministic_and_sorted() -> None:
    fabric = FABRICS["clos3"]
    a = for_fabric(fabric).nic_routes(("host0", "mlx5_0"), ("host3", "mlx5_0"))
    b = for_fabric(fabric).nic_routes(("host0", "mlx5_0"), ("host3", "mlx5_0"))
    assert a == b
    assert [(r.src_node, r.dst_node, r.path) for r in a] == sorted((r.src_node, r.dst_node, r.path) for r in a)


def test_down_links_are_never_candidates_and_ports_follow_the_new_next_hops() -> None:
    fabric = FABRICS["leaf-spine"]
    link = next(x.name for x in fabric.links if not x.is_host_link and x.a == "leaf0")
    failed = with_link_state(fabric, link, LinkState.DOWN)
    cands = for_fabric(failed)
    for r in cands.nic_routes(("host0", "mlx5_0"), ("host5", "mlx5_0")):
        assert link not in r.links
        assert ref_v1_path(cands.view, r.src_node, r.dst_node, r.sport) == r.path
    host_link = next(x.name for x in fabric.links if x.is_host_link and x.a == "host0:mlx5_0:p0")
    cands = for_fabric(with_link_state(fabric, host_link, LinkState.DOWN))
    assert {r.src_node for r in cands.nic_routes(("host0", "mlx5_0"), ("host5", "mlx5_0"))} == {"host0:mlx5_0:p1"}
