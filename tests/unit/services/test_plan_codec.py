"""Parts and plans in columns for the planning processes (`services.plan_codec`): what comes
out is what went in, value for value, through a real pickle."""

from __future__ import annotations

import pickle
import time

from controller.domain.jobs import Assignment, FlowKey
from controller.services import plan_codec
from controller.te import planner
from controller.te.candidates import for_fabric
from controller.te.config import Config
from controller.te.instance import ActiveJob
from controller.te.solution import Status
from controller.topology.generate import Clos3Spec, clos3
from tests.unit.te.conftest import flows_of, ring


def _trip(packed: plan_codec.Packed) -> plan_codec.Packed:
    return pickle.loads(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL))  # type: ignore[no-any-return]


def test_a_part_and_its_plans_round_trip() -> None:
    fabric = clos3(Clos3Spec(pods=2, leaves_per_pod=2, spines_per_pod=2, cores=2, hosts_per_leaf=2))
    hosts = sorted(h.name for h in fabric.hosts)
    a = flows_of(ring("a", fabric, hosts[:4], 2, 3, 1), fabric)
    b = flows_of(ring("b", fabric, hosts[2:6], 1, 2, 2), fabric)
    config = Config(time_limit_s=3.0, seed=7)
    placed = planner.plan(fabric, {"b": b}, {}, config, for_fabric(fabric))["b"]
    # weights that are not k / n, a source port not looked up yet, and an empty job
    odd = {k: Assignment(x.key, x.src_node, x.dst_node, -1 if i == 0 else x.udp_sport, 0.1 + i / 3, x.path, x.links)
           for i, (k, x) in enumerate(placed.assignments.items())}
    task = planner.PartTask({"a": a, "empty": []}, {"b": ActiveJob(b, odd), "c": ActiveJob([])}, config, time.monotonic())
    back = plan_codec.unpack_task(_trip(plan_codec.pack_task(task)))
    assert back == task
    assert list(back.targets) == ["a", "empty"] and list(back.active["b"].assignments) == list(odd)

    plans = planner.plan_part(fabric, planner.PartTask({"a": a}, {"b": ActiveJob(b, placed.assignments)}, config,
                                                       time.monotonic() + 3.0))
    plans["failed"] = planner.JobPlan("failed", Status.NO_PATH, {}, None, "no path between ranks 0 and 1")
    back_plans = plan_codec.unpack_plans(_trip(plan_codec.pack_plans(plans)))
    assert back_plans == plans
    assert all(type(k) is FlowKey for k in back_plans["a"].assignments)
