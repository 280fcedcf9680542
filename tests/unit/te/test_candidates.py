"""Candidate routes: every equal-cost path gets a source port that the reference hash agrees with."""

from __future__ import annotations

import pytest

from controller.domain.fabric import ROCE_SPORT_MIN, LinkState
from controller.te.candidates import for_fabric
from controller.te.ports import MAX_SPORT_TRIES, ModelPorts
from controller.topology.build import with_link_state
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine
from controller.topology.graph import FabricView
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


def _first_ports(view: FabricView, s: str, d: str, paths: set[tuple[str, ...]]) -> dict[tuple[str, ...], int]:
    """The reference, one port at a time: the first port of 49152.. on each path."""
    out: dict[tuple[str, ...], int] = {}
    for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + MAX_SPORT_TRIES):
        p = ref_v1_path(view, s, d, sport)
        if p in paths and p not in out:
            out[p] = sport
            if len(out) == len(paths):
                break
    return out


@pytest.mark.parametrize("kind", sorted(FABRICS))
def test_block_sampling_and_inherited_ports_give_the_first_port_of_the_reference(kind: str) -> None:
    fabric = FABRICS[kind]
    old = for_fabric(fabric)
    ports = sorted(old.view.ports)
    pairs = [(s, d) for s in ports[:4] for d in ports[-4:]]
    for s, d in pairs:
        old.port_routes(s, d)
    link = sorted(x.name for x in fabric.links if not x.is_host_link)[-1]  # a spine-core / leaf-spine link
    failed = for_fabric(with_link_state(fabric, link, LinkState.DOWN))
    failed.inherit(old)
    assert isinstance(failed.ports, ModelPorts) and isinstance(old.ports, ModelPorts)
    assert failed.ports.hashes is old.ports.hashes
    for cands in (old, failed):
        assert isinstance(cands.ports, ModelPorts)
        for s, d in pairs:
            paths = set(cands.view.equal_cost_paths(s, d))
            want = _first_ports(cands.view, s, d, paths)
            assert {r.path: r.sport for r in cands.port_routes(s, d)} == want
            some = set(sorted(paths)[::2])
            assert cands.ports.first_ports(s, d, some) == {p: v for p, v in want.items() if p in some}


def test_hash_cache_shared_by_threads_stays_right() -> None:
    """The service's link PATCHes and its planner worker share one `HashCache`; values asked
    for and stored from two threads at once, while the cache grows, are all the reference's."""
    import sys
    import threading
    from hashlib import sha256

    import numpy as np

    from controller.te.ports import HashCache

    def reference(prefix: bytes, port: int) -> int:
        return int.from_bytes(sha256(prefix + b"%d|4791" % port).digest()[:8], "big")

    prefix = b"7|10.0.0.1|10.0.0.2|17|"
    known = np.array([reference(prefix, ROCE_SPORT_MIN + i) for i in range(512)], np.uint64)
    errors: list[BaseException] = []
    wrong: list[int] = []

    def trial(cache: HashCache, start: threading.Barrier, seed: int) -> None:
        try:
            start.wait()
            for size in (70, 140, 280, 512)[seed % 2:]:  # each step grows the key's arrays
                if seed % 2:
                    cache.store(prefix, known[:size])
                else:
                    offsets = np.arange(size - 40, size)
                    got = cache.values(prefix, offsets)
                    wrong.extend(int(o) for o, v in zip(offsets, got, strict=True) if v != known[o])
        except BaseException as exc:  # any failure in the thread fails the test
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(400):
            cache, start = HashCache(), threading.Barrier(2)
            threads = [threading.Thread(target=trial, args=(cache, start, s)) for s in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and wrong == []


@pytest.mark.parametrize("kind", sorted(FABRICS))
def test_routes_whose_port_is_looked_up_when_chosen_get_the_port_a_full_sampling_gives(kind: str) -> None:
    """A large instance's routes carry no source port until the planner chooses one
    (`path_routes`, `sport_for`); the port it then gets is the one sampling the whole pair
    would have given, and a window of k paths rotates over the sorted paths."""
    from controller.te.candidates import UNKNOWN

    fabric = FABRICS[kind]
    lazy, full = for_fabric(fabric), for_fabric(fabric)
    ports = sorted(lazy.view.ports)
    for s in ports[:3]:
        for d in ports[-3:]:
            routes = lazy.path_routes(s, d)
            assert routes and all(r.sport == UNKNOWN for r in routes)
            assert {r.path: lazy.sport_for(r) for r in routes} == {r.path: r.sport for r in full.port_routes(s, d)}
            assert [r.links for r in routes] == [r.links for r in full.port_routes(s, d)]
            n = len(routes)
            window = lazy.path_routes(s, d, 2, n - 1)
            assert [r.path for r in window] == [routes[n - 1].path, routes[0].path][: min(2, n)]
