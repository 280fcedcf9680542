"""Property tests: what the API's fabric validation accepts, the planner can use.

Hypothesis draws hand-written-style fabric documents (any mix of leaves, spines and cores, any
links between them, hosts with one or two NICs of one or two ports on any switch, some links
down) and a ring job over their hosts. Whenever the document passes the request schema and
`validate.problems`, and the job passes `flows.problems`:

- the planner never raises: it returns a plan or a `no_path` value naming the pair;
- with every link up, every flow is planned, and the plan passes the solver-free validator.

And the other way round, documents the schema refuses come back as problems naming a field,
never as an exception from the validator or the planner.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api.schemas.topology import TopologyCreate
from controller.domain.fabric import Fabric, LinkState
from controller.domain.jobs import JobSpec, Pattern, RankSpec, TrafficSpec
from controller.te import flows as job_flows
from controller.te import planner
from controller.te.config import Config
from controller.te.solution import Status
from controller.te.validate import plan_problems
from controller.topology.graph import FabricView
from controller.topology.validate import problems

CONFIG = Config(time_limit_s=1.0, with_ecmp=False, with_simulation=False)
ROLES = ("leaf", "spine", "core")


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    roles = draw(st.lists(st.sampled_from(ROLES), min_size=1, max_size=6))
    if "leaf" not in roles:
        roles[0] = "leaf"
    switches = [{"name": f"{role}{i}", "role": role} for i, role in enumerate(roles)]
    names = [s["name"] for s in switches]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    port = {n: 0 for n in names}

    def next_port(switch: str) -> str:
        port[switch] += 1
        return f"Ethernet{port[switch]}"

    states = st.sampled_from(["up", "up", "up", "down", "drained"])
    links = [{"a": a, "a_port": next_port(a), "b": b, "b_port": next_port(b),
              "capacity_gbps": draw(st.sampled_from([100.0, 200.0, 400.0])), "state": draw(states)}
             for a, b in chosen]
    hosts = []
    address = 0
    for h in range(draw(st.integers(1, 4))):
        nics = []
        for n in range(draw(st.integers(1, 2))):
            ports = []
            for p in range(draw(st.integers(1, 2))):
                address += 1
                switch = draw(st.sampled_from(names))
                ports.append({"name": f"p{p}", "address": f"10.0.{address // 250}.{address % 250 + 1}",
                              "switch": switch, "switch_port": next_port(switch),
                              "capacity_gbps": draw(st.sampled_from([100.0, 200.0])), "state": draw(states)})
            nics.append({"name": f"mlx5_{n}", "rail": n, "ports": ports})
        hosts.append({"name": f"host{h}", "nics": nics})
    return {"name": "drawn", "switches": switches, "links": links, "hosts": hosts}


def _ring(fabric: Fabric) -> JobSpec:
    ranks = tuple(RankSpec(i, h.name, h.nics[0].name) for i, h in enumerate(fabric.hosts))
    if len(ranks) < 2:  # a ring needs two ranks: two on the one host's two NICs, or skip
        host = fabric.hosts[0]
        ranks = tuple(RankSpec(i, host.name, nic.name) for i, nic in enumerate(host.nics))
    return JobSpec("ring", ranks, (TrafficSpec(Pattern.RING, tuple(r.rank for r in ranks), channels=2,
                                               qps_per_connection=1),))


def _all_up(fabric: Fabric) -> Fabric:
    from dataclasses import replace
    return replace(fabric, links=tuple(replace(link, state=LinkState.UP) for link in fabric.links))


def _plan(fabric: Fabric, spec: JobSpec) -> planner.JobPlan:
    flows = job_flows.derive_flows(spec)
    return planner.plan(fabric, {spec.name: flows}, {}, CONFIG)[spec.name]


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_an_accepted_fabric_is_one_the_planner_can_use(doc: dict[str, Any]) -> None:
    try:
        fabric = TopologyCreate.model_validate(doc).to_fabric()
    except ValidationError:
        assume(False)
        return
    assume(problems(fabric) == [])
    spec = _ring(fabric)
    assume(len(spec.ranks) >= 2 and job_flows.problems(spec, fabric) == [])
    flows = job_flows.derive_flows(spec)

    as_drawn = _plan(fabric, spec)  # some links down: a plan, or no_path as a value
    assert as_drawn.status in set(Status)
    if as_drawn.summary is None:
        assert as_drawn.status == Status.NO_PATH and as_drawn.error

    up = _all_up(fabric)
    plan = _plan(up, spec)
    assert plan.summary is not None, f"validated fabric, all links up, yet: {plan.status} {plan.error}"
    assert plan_problems(FabricView(up), flows, plan.assignments) == []


@settings(max_examples=150, deadline=None, derandomize=True)
@given(documents(), st.sampled_from(["hosts", "links", "switches"]), st.integers(0, 5),
       st.sampled_from(["name", "switch", "a", "capacity_gbps", "address", "role"]),
       st.sampled_from(["", "..", "x\u202ey", "a b", "n\x00", 2**70, -1, None, "host0:mlx5_0:p0"]))
def test_a_broken_document_is_refused_by_field_never_by_an_exception(
        doc: dict[str, Any], where: str, index: int, key: str, value: Any) -> None:
    items = doc[where]
    if items:
        target = items[index % len(items)]
        if where == "hosts":
            target = target["nics"][0]["ports"][0]
        target[key] = value
    try:
        fabric = TopologyCreate.model_validate(doc).to_fabric()
    except ValidationError as exc:
        assert all(err["loc"] for err in exc.errors())
        return
    for problem in problems(fabric):
        assert problem.field and problem.message
