"""Probed mode, pure part: hop addresses become paths; a probe book gives ports only for fresh
entries; the planner then plans only on probed ports and the validator checks against them."""

from __future__ import annotations

from controller.domain.fabric import ROCE_SPORT_MIN, Hashing, HashingMode
from controller.te import planner
from controller.te.candidates import Candidates
from controller.te.probes import ProbeBook, ProbeEntry, hops_to_path
from controller.te.validate import plan_problems
from controller.topology.generate import LeafSpineSpec, leaf_spine
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path

from .conftest import FAST, flows_of, ring

FABRIC = leaf_spine(LeafSpineSpec(leaves=2, spines=2, hosts_per_leaf=2))
NOW_US = 1_764_430_000_000_000


def entries(view: FabricView, t_us: int) -> list[ProbeEntry]:
    out = []
    for s in view.ports.values():
        for d in view.ports.values():
            if s.host == d.host:
                continue
            for sport in range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + 32):
                path = ref_v1_path(view, s.node, d.node, sport)
                assert path is not None
                out.append(ProbeEntry(s.address, d.address, sport, path, t_us))
    return out


def test_hops_map_to_the_path_and_unknown_hops_do_not() -> None:
    view = FabricView(FABRIC)
    path = ref_v1_path(view, "host0:mlx5_0:p0", "host2:mlx5_0:p0", 50000)
    assert path is not None
    hops = [view.switches[s].mgmt_address or "" for s in path[1:-1]] + [view.ports["host2:mlx5_0:p0"].address]
    src, dst = view.ports["host0:mlx5_0:p0"].address, view.ports["host2:mlx5_0:p0"].address
    assert hops_to_path(view, src, dst, hops) == path
    assert hops_to_path(view, src, dst, ["192.0.2.99"]) is None


def test_planning_on_probed_ports_only_and_stale_entries_expire() -> None:
    from dataclasses import replace

    fabric = replace(FABRIC, hashing=Hashing(mode=HashingMode.PROBED))
    view = FabricView(fabric)
    book = ProbeBook(view, entries(view, NOW_US - 1_000_000), NOW_US, ttl_s=60)
    flows = flows_of(ring("j", fabric, [h.name for h in fabric.hosts], 1, 2, 0), fabric)
    p = planner.plan(fabric, {"j": flows}, {}, FAST, Candidates(view, book))["j"]
    assert p.summary is not None
    assert plan_problems(view, flows, p.assignments, book.seen()) == []
    stale = ProbeBook(view, entries(view, NOW_US - 120_000_000), NOW_US, ttl_s=60)
    assert stale.missing_pairs([("host0:mlx5_0:p0", "host2:mlx5_0:p0")]) == [("10.0.0.2", "10.0.0.10")]
    failed = planner.plan(fabric, {"j": flows}, {}, FAST, Candidates(view, stale))["j"]
    assert failed.summary is None and failed.error is not None
