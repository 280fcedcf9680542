"""Probed mode improves as knowledge grows: a ring planned as soon as each pair has one probed
path is re-planned when the agents' probes cover the rest, and then plans as well as model
mode does; until then its `lower_bound` is proven over every equal-cost path (not only the
probed ones) and `paths_known` says how much of the fabric the plan could use."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.domain.fabric import ROCE_SPORT_MIN, Hashing, HashingMode
from controller.domain.jobs import JobSpec, Pattern, RankSpec, TrafficSpec
from controller.services import jobs, planning, probes, topology
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store.migrate import upgrade
from controller.te import flows as job_flows
from controller.te import planner as te_planner
from controller.topology.generate import LeafSpineSpec, leaf_spine
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path

MODEL = leaf_spine(LeafSpineSpec(leaves=4, spines=4, hosts_per_leaf=1, ports_per_nic=1, fabric_gbps=50.0))
PROBED = MODEL.__class__(MODEL.name, Hashing(HashingMode.PROBED), MODEL.switches, MODEL.links, MODEL.hosts)
RING = JobSpec("r", tuple(RankSpec(i, f"host{i}", "mlx5_0") for i in range(4)),
               (TrafficSpec(Pattern.RING, (0, 1, 2, 3), channels=2, qps_per_connection=4),))


def _probe(rt: Runtime, view: FabricView, sports: range) -> None:
    """What node agents report for every pair the controller asks about: each source port's
    hops, as the switches (here the hash model) route it."""
    for r in probes.requests(rt, None):
        src, dst = view.ports_by_address[r["src_address"]].node, view.ports_by_address[r["dst_address"]].node
        results = []
        for sport in sports:
            path = ref_v1_path(view, src, dst, sport)
            assert path is not None
            results.append((sport, [view.switches[s].mgmt_address or "" for s in path[1:-1]] + [r["dst_address"]]))
        probes.record(rt, r["src_address"], r["dst_address"], "udp", 4791, results, None)


def test_a_probed_ring_reaches_model_quality_once_its_probes_are_in(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    rt = Runtime.from_settings(Settings(database_url=url, data_dir=tmp_path))
    planner = planning.install(rt)
    topology.replace(rt, PROBED)
    view = FabricView(PROBED)
    jobs.create(rt, RING)
    _probe(rt, view, range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + 1))  # one port per pair: one path each
    planner.step()
    early = jobs.get(rt, "r")
    assert early["status"] == "planned"
    model = te_planner.plan(MODEL, {"r": job_flows.derive_flows(RING)}, {})["r"].summary
    assert model is not None
    assert early["plan"]["paths_known"] < 1.0
    assert early["plan"]["lower_bound"] <= model.max_link_utilization + 1e-9  # over every path
    assert early["plan"]["max_link_utilization"] > model.max_link_utilization  # little to choose from
    _probe(rt, view, range(ROCE_SPORT_MIN, ROCE_SPORT_MIN + 64))  # the agents' full budget
    assert probes.requests(rt, None) == []  # every path of every pair known
    planner.step()
    late = jobs.get(rt, "r")
    assert late["version"] > early["version"] and late["plan"]["paths_known"] == pytest.approx(1.0)
    assert late["plan"]["max_link_utilization"] == pytest.approx(model.max_link_utilization)
    assert late["plan"]["lower_bound"] == pytest.approx(model.lower_bound)
    planner.step()  # nothing more to learn: no further re-plan
    assert jobs.get(rt, "r")["version"] == late["version"]
    rt.engine.dispose()
